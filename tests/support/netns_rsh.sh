#!/bin/sh
# netns_rsh.sh HOST COMMAND... — stands in for ssh in the multi-host tests:
# runs COMMAND (one shell string, as ssh would) inside the network namespace
# that plays HOST. LOCKSTEP_TEST_NETNS maps hosts to namespaces:
# "10.77.0.1=nsA,10.77.0.2=nsB".
host=$1
shift
for pair in $(echo "$LOCKSTEP_TEST_NETNS" | tr ',' ' '); do
  if [ "${pair%%=*}" = "$host" ]; then
    exec ip netns exec "${pair#*=}" sh -c "$*"
  fi
done
echo "netns_rsh: no namespace plays host '$host' (LOCKSTEP_TEST_NETNS=$LOCKSTEP_TEST_NETNS)" >&2
exit 255
