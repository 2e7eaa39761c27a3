#!/usr/bin/env bash
# Local services the docker sandbox needs, on one Debian 12 machine, without Docker Hub.
#   bash scripts/services.sh start  docker|registry|s3|all   install if missing, start, wait until up
#   bash scripts/services.sh stop   docker|registry|s3|all   stop what THIS script started (by PID)
#   bash scripts/services.sh status docker|registry|s3|all   exit 0 only if every named service answers
# Idempotent: starting a service that already answers only checks it (whoever started it).
# Only loopback is ever used: dockerd gets no bridge and no iptables rules, the registry listens
# on 127.0.0.1:5000 only, the S3 store (moto's server, the DVC remote of the tests) on
# 127.0.0.1:9000 only.
set -euo pipefail
# the daemons and runuser live in sbin, which the PATH of a non-login or CI shell may lack
case ":$PATH:" in *:/usr/sbin:*) ;; *) export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" ;; esac

STATE_DIR=${FORGELINE_SERVICES_DIR:-/tmp/forgeline-services}
DOCKER_SOCK=/var/run/docker.sock
DOCKERD_LOG=/var/log/forgeline-dockerd.log
REGISTRY_ADDR=127.0.0.1:5000
REGISTRY_DIR=$STATE_DIR/registry
REGISTRY_CONF=$STATE_DIR/registry.yml
REGISTRY_LOG=$STATE_DIR/registry.log
S3_ADDR=127.0.0.1:9000
S3_VENV=$STATE_DIR/s3-venv
S3_LOG=$STATE_DIR/s3.log
S3_REQUIREMENTS=$(cd "$(dirname "$0")/.." && pwd)/envs/s3-requirements.txt
WAIT_S=60

log() { echo "[services $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
recorded_pid() { [ -s "$STATE_DIR/$1.pid" ] && cat "$STATE_DIR/$1.pid" || true; }

# Wait until UP_FN answers; stop with the log's last lines when PID dies or time runs out.
wait_until_up() {  # NAME UP_FN PROCESS PID LOG
  local name=$1 up=$2 process=$3 pid=$4 logfile=$5
  for _ in $(seq $((WAIT_S * 5))); do
    "$up" && { log "$name: answers ($process pid $pid)"; return 0; }
    alive "$pid" || { tail -20 "$logfile" >&2; die "$process exited (log: $logfile)"; }
    sleep 0.2
  done
  tail -20 "$logfile" >&2
  die "$name: no answer after ${WAIT_S}s (log: $logfile)"
}

# apt-get install PKG..., with `apt-get update` at most once per machine boot (the stamp lives
# in /tmp); waits for a dpkg lock held by someone else instead of failing.
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -o DPkg::Lock::Timeout=300 -q)
  # No init script may start a package's daemon (wrong flags, wrong address): deny it unless
  # the machine already has a policy.
  local own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  if [ ! -e "$STATE_DIR/apt-updated" ]; then
    log "apt-get update"
    "${apt[@]}" update -qq && touch "$STATE_DIR/apt-updated"
  fi
  log "apt-get install $*"
  local rc=0
  "${apt[@]}" install -y -qq --no-install-recommends "$@" >"$STATE_DIR/apt.log" 2>&1 || rc=$?
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || { tail -20 "$STATE_DIR/apt.log" >&2; die "apt-get install $* failed (log: $STATE_DIR/apt.log)"; }
}

# -- docker --------------------------------------------------------------------------------

docker_up() {
  # the engine's own /_ping: independent of which docker CLI is on PATH
  curl -sf --max-time 2 --unix-socket "$DOCKER_SOCK" http://localhost/_ping >/dev/null 2>&1
}

start_docker() {
  # mmdebstrap: the sandbox's base image is built offline from Debian's packages
  local missing=()
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  docker_up || command -v dockerd >/dev/null || missing+=(docker.io)
  [ ${#missing[@]} = 0 ] || apt_install "${missing[@]}"
  if docker_up; then log "docker: engine already answers at unix://$DOCKER_SOCK"; return 0; fi
  local pid; pid=$(recorded_pid dockerd)
  if alive "$pid"; then
    log "docker: dockerd (pid $pid) is starting; waiting"
  else
    # a dockerd killed hard leaves its pidfile behind and refuses to start again
    [ -s /var/run/docker.pid ] && ! alive "$(cat /var/run/docker.pid)" && rm -f /var/run/docker.pid
    log "docker: starting dockerd (log: $DOCKERD_LOG)"
    # --bridge=none/--iptables=false: no host networking is touched; containers run with
    # network_mode none anyway. setsid: the daemon outlives the shell that started it.
    setsid dockerd --bridge=none --iptables=false --ip6tables=false \
      </dev/null >>"$DOCKERD_LOG" 2>&1 &
    pid=$!
    echo "$pid" > "$STATE_DIR/dockerd.pid"
  fi
  wait_until_up docker docker_up dockerd "$pid" "$DOCKERD_LOG"
}

# -- registry ------------------------------------------------------------------------------

registry_up() { curl -s --max-time 2 "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1; }

start_registry() {
  if registry_up; then log "registry: already answers at http://$REGISTRY_ADDR/v2/"; return 0; fi
  if ! command -v docker-registry >/dev/null; then
    apt_install docker-registry
  fi
  mkdir -p "$REGISTRY_DIR"
  # our own config, not /etc/docker/registry/config.yml (which listens on every address)
  cat > "$REGISTRY_CONF" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $REGISTRY_DIR
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
  secret: forgeline-local-only
EOF
  local pid; pid=$(recorded_pid registry)
  if ! alive "$pid"; then
    log "registry: starting docker-registry on $REGISTRY_ADDR (storage: $REGISTRY_DIR)"
    setsid docker-registry serve "$REGISTRY_CONF" </dev/null >>"$REGISTRY_LOG" 2>&1 &
    pid=$!
    echo "$pid" > "$STATE_DIR/registry.pid"
  fi
  wait_until_up registry registry_up docker-registry "$pid" "$REGISTRY_LOG"
}

# -- s3 (an S3-compatible object store: moto's server) ---------------------------------------

# Any answer from the root (moto lists the buckets to anyone: it checks no signature) is up.
s3_up() { curl -s --max-time 2 -o /dev/null "http://$S3_ADDR/" 2>/dev/null; }

# moto[server] and every dependency pinned in envs/s3-requirements.txt, in a venv of its own
# (its boto3 would clash with dvc-s3's in .venv/); reinstalled when the file changes.
s3_venv() {
  local want; want=$(sha256sum "$S3_REQUIREMENTS" | cut -d' ' -f1)
  [ -x "$S3_VENV/bin/moto_server" ] && [ "$(cat "$S3_VENV/.requirements.sha256" 2>/dev/null)" = "$want" ] \
    && return 0
  python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv  # Debian splits it off
  log "s3: installing moto[server] into $S3_VENV (envs/s3-requirements.txt)"
  python3 -m venv "$S3_VENV"
  "$S3_VENV/bin/pip" install -q --disable-pip-version-check -r "$S3_REQUIREMENTS" >"$STATE_DIR/s3-pip.log" 2>&1 \
    || { tail -20 "$STATE_DIR/s3-pip.log" >&2; die "s3: pip install failed (log: $STATE_DIR/s3-pip.log)"; }
  echo "$want" > "$S3_VENV/.requirements.sha256"
}

start_s3() {
  if s3_up; then log "s3: already answers at http://$S3_ADDR/"; return 0; fi
  s3_venv
  local pid; pid=$(recorded_pid s3)
  if ! alive "$pid"; then
    log "s3: starting moto_server on $S3_ADDR (log: $S3_LOG; buckets live in its memory)"
    setsid "$S3_VENV/bin/moto_server" -H "${S3_ADDR%:*}" -p "${S3_ADDR##*:}" \
      </dev/null >>"$S3_LOG" 2>&1 &
    pid=$!
    echo "$pid" > "$STATE_DIR/s3.pid"
  fi
  wait_until_up s3 s3_up moto_server "$pid" "$S3_LOG"
}

# -- stop / status -------------------------------------------------------------------------

stop_one() {  # NAME: kill the process this script recorded, TERM then KILL
  local name=$1 pid; pid=$(recorded_pid "$name")
  if ! alive "$pid"; then
    log "$name: nothing started by this script is running"; rm -f "$STATE_DIR/$name.pid"; return 0
  fi
  log "$name: stopping pid $pid"
  kill "$pid"
  for _ in $(seq 150); do alive "$pid" || break; sleep 0.1; done   # dockerd stops containers first
  if alive "$pid"; then log "$name: still alive after 15 s, SIGKILL"; kill -9 "$pid"; fi
  rm -f "$STATE_DIR/$name.pid"
}

status_one() {
  case $1 in
    docker) if docker_up; then echo "docker: up (unix://$DOCKER_SOCK)"; else echo "docker: down"; return 1; fi ;;
    registry) if registry_up; then echo "registry: up (http://$REGISTRY_ADDR)"; else echo "registry: down"; return 1; fi ;;
    s3) if s3_up; then echo "s3: up (http://$S3_ADDR)"; else echo "s3: down"; return 1; fi ;;
  esac
}

usage() { echo "usage: $0 {start|stop|status} {docker|registry|s3|all}" >&2; exit 2; }

action=${1:-}; what=${2:-all}
case $what in
  docker|registry|s3) services=("$what") ;;
  all) services=(docker registry s3) ;;
  *) usage ;;
esac
mkdir -p "$STATE_DIR"

case $action in
  start)
    command -v curl >/dev/null || apt_install curl ca-certificates
    for s in "${services[@]}"; do "start_$s"; done ;;
  stop)
    # reverse order: the registry before the engine
    for ((i=${#services[@]}-1; i>=0; i--)); do
      case ${services[$i]} in docker) stop_one dockerd ;; registry) stop_one registry ;; s3) stop_one s3 ;; esac
    done ;;
  status)
    rc=0; for s in "${services[@]}"; do status_one "$s" || rc=1; done; exit $rc ;;
  *) usage ;;
esac
