#!/usr/bin/env bash
# slurm_cluster.sh — a private, real one-host Slurm (22.05, Debian 12) that a
# test starts and stops, for the `lockstep sweep --scheduler slurm` and srun
# tests. Needs the slurm-wlm and munge packages (scripts/setup.sh) and root.
#
#   eval "$(tests/support/slurm_cluster.sh start DIR)"   # prints: export SLURM_CONF=DIR/slurm.conf
#   sbatch/srun/squeue/scancel/scontrol ...               # find the cluster via SLURM_CONF
#   tests/support/slurm_cluster.sh stop DIR               # idempotent; leaves no daemon behind
#
# DIR is a fresh directory the test made; everything (munge key and socket,
# slurm.conf, state, spool, pid and log files) lives under it, so two clusters
# in two dirs run side by side and the system's munge/slurm are never touched.
#
# What was found necessary on this machine (a 2-core VM, root, no systemd):
# - Our own munged: --force because it runs as root; its socket is named to
#   Slurm with AuthInfo=socket=..., which the daemons AND the clients (sbatch,
#   srun, squeue, ...) read from slurm.conf, so callers need only SLURM_CONF.
#   DIR's path must stay short: the munge socket and slurmstepd's sockets under
#   DIR/spool are Unix sockets (sun_path limit: 108 bytes).
# - No cgroups: ProctrackType=proctrack/linuxproc and TaskPlugin=task/none, so
#   neither slurmd nor slurmstepd needs cgroup.conf or a cgroup hierarchy.
# - CPUs=$(nproc) and RealMemory 10% below MemTotal: slurmd drains a node
#   that has less than its configured memory. OverSubscribe=FORCE lets tests
#   run more tasks than cores.
# - SlurmctldPort/SlurmdPort: free ports picked under a lock (flock), held
#   until both daemons listen, so concurrent starts cannot pick the same port.
# - ReturnToService=2 so the node comes up idle as soon as slurmd registers.
# - JobCompType=jobcomp/filetxt (DIR/jobcomp.log): with accounting_storage/none
#   there is no sacct database; `sacct -c` (--completion) reads this file, and
#   it keeps each finished job's State and ExitCode after MinJobAge (300 s)
#   makes `scontrol show job ID` forget it.
# - KillWait=5: scancel'd tasks get SIGKILL 5 s after SIGTERM (default 30).
# - SchedulerParameters=batch_sched_delay=0: an sbatch job starts ~1 s after
#   submission instead of ~3 s (the default lets batch jobs wait 3 s).
# - The daemons run as root (SlurmUser=SlurmdUser=root), so files under DIR
#   need no chown; slurmctld and slurmd daemonize and write pid files.
# - Processes that exit are reaped late on this VM (zombies linger), so "has
#   exited" means "no /proc/PID or state Z", not `kill -0`.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
[ -d "$2" ] || [ "$cmd" != stop ] || exit 0 # nothing was started there
DIR=$(cd "$2" 2>/dev/null && pwd) || { echo "slurm_cluster: no directory $2" >&2; exit 2; }
CONF=$DIR/slurm.conf
PORT_LOCK=/tmp/lockstep-slurm-cluster.ports.lock

# alive PID: true while PID runs (a zombie counts as gone).
alive() {
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
  local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# stop_pidfile NAME FILE: SIGTERM, up to 5 s, then SIGKILL; removes FILE.
stop_pidfile() {
  local name=$1 file=$2 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null || true)
  if [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      echo "slurm_cluster: $name (pid $pid) ignored SIGTERM; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 20); do alive "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$file"
}

# slurmstepd (one per running job step, the parent of its tasks) outlives
# slurmd; ours are the ones whose environment names our slurm.conf (slurmd was
# started with SLURM_CONF set, and its slurmstepds inherit it).
our_stepds() {
  local pid
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    alive "$pid" || continue
    if { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$CONF"; then
      echo "$pid"
    fi
  done
}

# descendants PID...: the PIDs and all their descendants.
descendants() {
  local pid
  for pid in "$@"; do
    echo "$pid"
    # shellcheck disable=SC2046
    descendants $(pgrep -P "$pid" 2>/dev/null || true)
  done
}

# Kills the slurmstepds left over and the tasks under them.
stop_stepds() {
  local pids
  # shellcheck disable=SC2046
  pids=$(descendants $(our_stepds))
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
}

stop_cluster() {
  # Cancel jobs first, if the controller still answers, and give their
  # slurmstepds 3 s to end the tasks (KillWait would take longer).
  if [ -f "$DIR/slurmctld.pid" ] && alive "$(cat "$DIR/slurmctld.pid" 2>/dev/null)"; then
    SLURM_CONF=$CONF timeout 5 scancel --user="$(id -un)" >/dev/null 2>&1 || true
    for _ in $(seq 30); do [ -z "$(our_stepds)" ] && break; sleep 0.1; done
  fi
  stop_pidfile slurmd "$DIR/slurmd.pid"
  stop_pidfile slurmctld "$DIR/slurmctld.pid"
  stop_stepds
  stop_pidfile munged "$DIR/munged.pid"
}

# die WHAT: error before anything was started; exit 1.
die() { echo "slurm_cluster: start failed: $1" >&2; exit 1; }

# fail WHAT LOG: error, the log's tail, stop what we started, exit 1.
fail() {
  echo "slurm_cluster: start failed: $1" >&2
  if [ -n "${2:-}" ] && [ -s "$2" ]; then
    echo "--- last lines of $2:" >&2
    tail -n 20 "$2" >&2
  fi
  stop_cluster
  exit 1
}

# A port no local socket uses, below the ephemeral range (32768+) so that no
# outgoing connection takes it later.
free_port() {
  local used port
  used=$(ss -Htan 2>/dev/null | awk '{n=split($4,a,":"); print a[n]}' | sort -u)
  for _ in $(seq 200); do
    port=$((20000 + RANDOM % 12000))
    if ! grep -qx "$port" <<<"$used" && [ "$port" != "${1:-}" ]; then
      echo "$port"; return 0
    fi
  done
  return 1
}

listening() { ss -Htln 2>/dev/null | awk '{print $4}' | grep -q ":$1\$"; }

start_cluster() {
  local t0=$SECONDS
  for c in munged mungekey slurmctld slurmd sinfo scancel ss flock; do
    command -v "$c" >/dev/null || die "$c is not installed (run scripts/setup.sh)"
  done
  local f
  for f in munged slurmctld slurmd; do
    if [ -f "$DIR/$f.pid" ] && alive "$(cat "$DIR/$f.pid" 2>/dev/null)"; then
      die "a cluster already runs in $DIR ($f.pid); stop it first"
    fi
  done
  local host cpus mem_mb
  host=$(hostname -s)
  # The longest Unix socket: slurmstepd's of a batch step, in the spool dir.
  local sock="$DIR/spool/${host}_99999999.4294967291"
  [ "${#sock}" -lt 108 ] ||
    die "DIR is too long for Unix socket paths (108 bytes): $sock; use a shorter one"
  cpus=$(nproc)
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  mkdir -p "$DIR/state" "$DIR/spool"

  # munge: key, then our own munged.
  mungekey --create --bits=1024 --keyfile="$DIR/munge.key" --force >/dev/null 2>&1 ||
    fail "mungekey could not create $DIR/munge.key"
  chmod 600 "$DIR/munge.key"
  munged --force --socket="$DIR/munge.socket" --key-file="$DIR/munge.key" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" \
    --seed-file="$DIR/munged.seed" 2>>"$DIR/munged.log" ||
    fail "munged did not start" "$DIR/munged.log"
  for _ in $(seq 50); do [ -S "$DIR/munge.socket" ] && break; sleep 0.1; done
  [ -S "$DIR/munge.socket" ] || fail "munged made no socket $DIR/munge.socket" "$DIR/munged.log"

  # Ports: picked and bound under one lock, so concurrent starts differ.
  exec {lock_fd}>"$PORT_LOCK"
  flock -w 60 "$lock_fd" || fail "another slurm_cluster.sh start holds $PORT_LOCK for over 60 s"
  local ctld_port slurmd_port
  ctld_port=$(free_port) || fail "no free TCP port for slurmctld"
  slurmd_port=$(free_port "$ctld_port") || fail "no free TCP port for slurmd"

  cat >"$CONF" <<EOF
# Written by tests/support/slurm_cluster.sh: a private one-host cluster.
ClusterName=lockstep-test
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
ReturnToService=2
KillWait=5
SchedulerParameters=batch_sched_delay=0
MailProg=/bin/true
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF

  # The daemons must not inherit the lock's fd ({lock_fd}>&-), or it would
  # stay locked while they run.
  SLURM_CONF=$CONF slurmctld -f "$CONF" {lock_fd}>&- >>"$DIR/slurmctld.log" 2>&1 ||
    fail "slurmctld did not start" "$DIR/slurmctld.log"
  SLURM_CONF=$CONF slurmd -f "$CONF" {lock_fd}>&- >>"$DIR/slurmd.log" 2>&1 ||
    fail "slurmd did not start" "$DIR/slurmd.log"
  for _ in $(seq 100); do
    listening "$ctld_port" && listening "$slurmd_port" && break
    sleep 0.1
  done
  listening "$ctld_port" || fail "slurmctld does not listen on port $ctld_port" "$DIR/slurmctld.log"
  listening "$slurmd_port" || fail "slurmd does not listen on port $slurmd_port" "$DIR/slurmd.log"
  flock -u "$lock_fd"
  exec {lock_fd}>&-

  # Wait (30 s at most) for the node to be idle.
  local state=""
  while [ $((SECONDS - t0)) -lt 30 ]; do
    state=$(SLURM_CONF=$CONF sinfo -h -N -o %T 2>/dev/null || true)
    case $state in
      idle) break ;;
      inval* | drain*) break ;; # registration refused (reason below): no use waiting
    esac
    for f in slurmctld slurmd; do
      alive "$(cat "$DIR/$f.pid" 2>/dev/null)" || fail "$f exited" "$DIR/$f.log"
    done
    sleep 0.2
  done
  if [ "$state" != idle ]; then
    {
      echo "--- sinfo:"
      SLURM_CONF=$CONF sinfo -N -o '%N %T reason: %E' 2>&1 || true
      echo "--- last lines of $DIR/slurmd.log:"
      tail -n 20 "$DIR/slurmd.log" 2>/dev/null || true
    } >&2
    fail "node $host is not idle (state: '${state:-no answer}', after $((SECONDS - t0)) s)" "$DIR/slurmctld.log"
  fi
  echo "export SLURM_CONF=$CONF"
}

case $cmd in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) usage ;;
esac
