#!/usr/bin/env bash
# A single-node Slurm cluster on localhost (munged + slurmctld + slurmd, Debian 12's packages:
# Slurm 22.05), for CI and for trying profiles/slurm on one machine. No systemd, no slurmdbd.
#   bash scripts/slurm.sh start    install if missing (apt, as root), configure, start, wait idle
#   bash scripts/slurm.sh stop     stop the daemons THIS script started (recorded PIDs), in reverse
#   bash scripts/slurm.sh status   exit 0 only if the node answers and can take jobs
# Idempotent: `start` with everything up only re-checks it (whoever started the daemons).
# Only loopback is used: the controller is localhost, the node's address 127.0.0.1.
#
# Pitfalls this script handles (each met for real, see docs/running.md):
# - /etc/slurm/slurm.conf is written BEFORE any Slurm client can run: without it a client falls
#   back to "configless" mode and sends a DNS SRV query for the controller, off the machine.
#   `stop` leaves the file in place for the same reason.
# - munged must run as user munge; /run/munge is made by hand (systemd's RuntimeDirectory=).
# - The hostname is not the node name: slurmd runs with -N localhost; RealMemory is 90% of
#   MemTotal (more than slurmd detects drains the node).
# - No slurmdbd: `sacct` cannot answer, so Snakemake's plugin must poll with squeue, which sees
#   finished jobs for MinJobAge (300 s) seconds. Finished jobs are also logged, permanently, to
#   /var/log/slurm/jobcomp.log (jobcomp/filetxt).
# - With the packages installed but slurmctld down, every `snakemake` call is ~10 s slower: the
#   plugin runs `scontrol show config` when it is imported, and the client retries for
#   MessageTimeout. Keep the cluster up while tests run; `stop` at the very end.
# - slurmctld cannot remove its own pidfile in /run (it drops to user slurm): `stop` does.
# - A controller this script starts forgets the jobs an earlier one saved (slurmctld -c): they
#   would hold the node as ghosts until their time limit.
set -euo pipefail
# the daemons and runuser live in sbin, which the PATH of a non-login or CI shell may lack
case ":$PATH:" in *:/usr/sbin:*) ;; *) export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" ;; esac

STATE_DIR=${FORGELINE_SERVICES_DIR:-/tmp/forgeline-services}
CONF=/etc/slurm/slurm.conf
PARTITION=${FORGELINE_SLURM_PARTITION:-cpu}   # profiles/slurm's default slurm_partition
LOG_DIR=/var/log/slurm
JOBCOMP_LOG=$LOG_DIR/jobcomp.log
WAIT_S=60

log() { echo "[slurm $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pid_in() { [ -s "$1" ] && tr -dc '0-9' < "$1" || true; }
# is NAME PID: the process exists and really is NAME (pidfiles outlive their process)
is() { alive "${2:-}" && [ "$(ps -p "$2" -o comm= 2>/dev/null)" = "$1" ]; }
# the daemon's own pidfile (slurm/munge write them when they fork)
daemon_pidfile() {
  case $1 in munged) echo /run/munge/munged.pid ;; slurmctld) echo /run/slurmctld.pid ;;
             slurmd) echo /run/slurmd.pid ;; esac
}
running() { is "$1" "$(pid_in "$(daemon_pidfile "$1")")"; }
record() { echo "$2" > "$STATE_DIR/$1.pid"; }   # NAME PID: this script started it

# apt-get install PKG..., one `apt-get update` per boot (stamp shared with scripts/services.sh);
# waits for a dpkg lock held by someone else; no package may start its daemon (policy-rc.d).
apt_install() {
  [ "$(id -u)" = 0 ] || die "$* missing and not root: sudo apt-get install --no-install-recommends $*"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -o DPkg::Lock::Timeout=300 -q) own_policy=0 rc=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  if [ ! -e "$STATE_DIR/apt-updated" ]; then
    log "apt-get update"
    "${apt[@]}" update -qq && touch "$STATE_DIR/apt-updated"
  fi
  log "apt-get install $*"
  # --no-install-recommends: 9 packages instead of 43
  "${apt[@]}" install -y -qq --no-install-recommends "$@" >"$STATE_DIR/apt-slurm.log" 2>&1 || rc=$?
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || { tail -20 "$STATE_DIR/apt-slurm.log" >&2; die "apt-get install $* failed"; }
}

render_conf() {
  local ncpu mem_mb
  ncpu=$(nproc)
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  cat <<EOF
# Written by forgeline's scripts/slurm.sh: a single-node cluster on localhost. Do not edit:
# the script rewrites it (and reconfigures) when it differs.
ClusterName=forgeline
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
# No slurmdbd: sacct cannot answer; Snakemake polls with squeue (slurm-status-command).
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Finished jobs stay visible to 'squeue --states=all' for MinJobAge seconds; the plugin needs
# MinJobAge >= 3 x slurm-init-seconds-before-status-checks, else it falls back to sacct.
MinJobAge=300
# A permanent record of every finished job (one line each), readable without slurmdbd.
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP_LOG
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$ncpu RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

node_state() {
  # never a client without $CONF; and none while no slurmctld runs (it would retry for 10 s)
  [ -s "$CONF" ] && command -v sinfo >/dev/null && running slurmctld || return 0
  timeout 20 sinfo -h -n localhost -o %t 2>/dev/null | head -1 || true
}

start() {
  mkdir -p "$STATE_DIR"
  # 1. Config first: no Slurm client may run without it (not even one a package's scripts call).
  local conf conf_changed=0
  conf=$(render_conf)
  if [ "$(cat "$CONF" 2>/dev/null)" != "$conf" ]; then
    [ "$(id -u)" = 0 ] || die "$CONF must be written as root"
    mkdir -p "$(dirname "$CONF")"
    printf '%s\n' "$conf" > "$CONF"; chmod 0644 "$CONF"; conf_changed=1
    log "wrote $CONF ($(grep -o 'CPUs=[0-9]* RealMemory=[0-9]*' "$CONF"))"
  fi

  # 2. Packages (~12 s).
  local missing=()
  [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sinfo >/dev/null \
    || missing+=(slurm-wlm)
  [ -x /usr/sbin/munged ] || missing+=(munge)
  [ ${#missing[@]} = 0 ] || apt_install "${missing[@]}"
  [ "$(node_state)" = idle ] && [ $conf_changed = 0 ] && { log "node localhost is idle"; return 0; }
  [ "$(id -u)" = 0 ] || die "the daemons must be started as root"

  # 3. Directories the daemons expect (a tmpfs /var/log or /run starts empty).
  install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd "$LOG_DIR"
  touch "$JOBCOMP_LOG"; chown slurm:slurm "$JOBCOMP_LOG"
  install -d -o munge -g munge -m 0755 /run/munge

  # 4. munged, as user munge. The package's postinst made /etc/munge/munge.key.
  if ! [ -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged   # forks, writes /run/munge/munged.pid
    for _ in $(seq 50); do running munged && break; sleep 0.1; done
    running munged || die "munged did not start"
    record munged "$(pid_in /run/munge/munged.pid)"
    munge -n | unmunge >/dev/null || die "munge self-test failed"
  fi

  # 5. slurmctld: forks, writes /run/slurmctld.pid, drops to SlurmUser=slurm.
  if running slurmctld && [ $conf_changed = 1 ]; then
    log "config changed: scontrol reconfigure"; scontrol reconfigure || true
  fi
  if ! running slurmctld; then
    rm -f /run/slurmctld.pid
    # -c: start with an empty queue. Jobs saved by an earlier controller cannot have outlived
    # its node's daemons (a reboot; a machine copied mid-run), yet slurmctld would recover them
    # as RUNNING and hold the node until their time limit: CI once waited 20 min on such a job.
    log "starting slurmctld with an empty queue (log: $LOG_DIR/slurmctld.log)"
    /usr/sbin/slurmctld -c
    for _ in $(seq 50); do running slurmctld && break; sleep 0.1; done
    running slurmctld || { tail -20 "$LOG_DIR/slurmctld.log" >&2; die "slurmctld did not start"; }
    record slurmctld "$(pid_in /run/slurmctld.pid)"
  fi

  # 6. slurmd: -N localhost, the machine's hostname is not the NodeName.
  if ! running slurmd; then
    rm -f /run/slurmd.pid
    log "starting slurmd (log: $LOG_DIR/slurmd.log)"
    /usr/sbin/slurmd -N localhost
    for _ in $(seq 50); do running slurmd && break; sleep 0.1; done
    running slurmd || { tail -20 "$LOG_DIR/slurmd.log" >&2; die "slurmd did not start"; }
    record slurmd "$(pid_in /run/slurmd.pid)"
  fi

  # 7. Wait until the node takes jobs.
  local state="" i
  for i in $(seq $((WAIT_S * 2))); do
    state=$(node_state)
    case $state in
      idle|mix|alloc) log "node localhost is $state (partition $PARTITION)"; return 0 ;;
      drain*|down*|drng)
        [ $((i % 10)) = 0 ] && scontrol update nodename=localhost state=resume 2>/dev/null || true ;;
    esac
    sleep 0.5
  done
  scontrol show node localhost >&2 || true
  tail -20 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" >&2 || true
  die "node not ready after ${WAIT_S}s (state '$state')"
}

stop() {
  local name pid
  for name in slurmd slurmctld munged; do   # reverse start order
    pid=$(pid_in "$STATE_DIR/$name.pid")
    if is "$name" "$pid"; then
      log "stopping $name (pid $pid)"
      kill "$pid"
      for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
      if alive "$pid"; then log "$name still alive after 10 s: SIGKILL"; kill -9 "$pid"; fi
    elif [ -n "$pid" ]; then
      log "$name: recorded pid $pid is not running"
    fi
    rm -f "$STATE_DIR/$name.pid"
  done
  # stale pidfiles in /run (slurmctld, as user slurm, cannot unlink its own; a stale one later
  # makes the package's prerm run scancel)
  for name in slurmctld slurmd munged; do
    running "$name" || rm -f "$(daemon_pidfile "$name")"
  done
}

status() {
  local state
  if ! [ -s "$CONF" ]; then echo "slurm: not configured ($CONF missing)"; return 1; fi
  state=$(node_state)
  case $state in
    idle|mix|alloc) echo "slurm: up (node localhost $state, partition $PARTITION)" ;;
    *) echo "slurm: down (node state '${state:-no answer}')"; return 1 ;;
  esac
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 {start|stop|status}" >&2; exit 2 ;;
esac
