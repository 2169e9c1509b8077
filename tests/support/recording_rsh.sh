#!/bin/sh
# recording_rsh.sh HOST COMMAND — stands in for ssh in the launcher tests:
# writes what it was handed (its arguments, then its environment) to
# $LOCKSTEP_TEST_RSH_RECORD/<pid>, then runs COMMAND on this host as ssh would
# on HOST (one shell string), keeping stdin.
record=${LOCKSTEP_TEST_RSH_RECORD:?recording_rsh: set LOCKSTEP_TEST_RSH_RECORD to a directory}
{
  printf 'argv:\n'
  printf '%s\n' "$@"
  printf 'environment:\n'
  env
} >"$record/$$"
shift
exec sh -c "$*"
