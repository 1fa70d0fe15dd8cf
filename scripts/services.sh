#!/usr/bin/env bash
# Starts and stops the services keycap's tests talk to, on loopback only.
#
#   scripts/services.sh up     start what is missing; print the environment to export
#   scripts/services.sh down   stop what "up" started
#
# "up" installs redis-server with apt when it is missing, starts Redis on
# 127.0.0.1:6379 when nothing answers there, and starts a Redis Cluster of 3
# masters and 3 replicas on ports KEYCAP_CLUSTER_PORT..+5 (default 30001-30006),
# and a Redis Sentinel on KEYCAP_SENTINEL_PORT (default 30100) that monitors the
# Redis above as master "keycap-test". For PostgreSQL it uses a server on
# KEYCAP_PG_SYSTEM (default 127.0.0.1:5432; empty: never) that lets
# "postgres" in without a password, and otherwise
# installs PostgreSQL with apt if needed and runs a cluster of its own, with
# trust authentication, on 127.0.0.1:KEYCAP_PG_PORT (default 30300).
# It records what it started under $KEYCAP_SERVICES_DIR (default
# /tmp/keycap-services) so that "down" stops exactly that.
#
# Usage from a shell:  eval "$(scripts/services.sh up)"
set -euo pipefail

DIR=${KEYCAP_SERVICES_DIR:-/tmp/keycap-services}
CPORT=${KEYCAP_CLUSTER_PORT:-30001}
REDIS_ADDR=${KEYCAP_REDIS_ADDR:-127.0.0.1:6379}
SPORT=${KEYCAP_SENTINEL_PORT:-30100}
SMASTER=keycap-test
PGPORT_OWN=${KEYCAP_PG_PORT:-30300}
PG_SYSTEM=${KEYCAP_PG_SYSTEM-127.0.0.1:5432}

log() { echo "services: $*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root to run: $*"
  fi
}

apt_install() {
  log "installing $* with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

# wait_for TIMEOUT_SECONDS COMMAND...: run COMMAND until it succeeds.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}

rping() { [ "$(redis-cli -h "$1" -p "$2" ping 2>/dev/null)" = PONG ]; }

redis_up() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server redis-tools
  local host=${REDIS_ADDR%:*} port=${REDIS_ADDR##*:}
  if rping "$host" "$port"; then
    log "Redis already answers on $REDIS_ADDR"
    return
  fi
  mkdir -p "$DIR/redis"
  log "starting Redis on $REDIS_ADDR"
  redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no \
    --dir "$DIR/redis" --pidfile "$DIR/redis/redis.pid" --logfile "$DIR/redis/redis.log"
  wait_for 10 rping "$host" "$port" || die "Redis did not start on $REDIS_ADDR (see $DIR/redis/redis.log)"
  touch "$DIR/redis/started-by-us"
}

cluster_ok() {
  local p
  for p in $(seq "$CPORT" $((CPORT + 5))); do
    redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
  # Every master must know of all 16384 slots.
  [ "$(redis-cli -p "$CPORT" cluster info | sed -n 's/^cluster_slots_ok:\([0-9]*\).*/\1/p')" = 16384 ]
}

cluster_up() {
  if rping 127.0.0.1 "$CPORT"; then
    if cluster_ok; then
      log "Redis Cluster already running on ports $CPORT-$((CPORT + 5))"
      return
    fi
    die "port $CPORT answers but is not a healthy cluster; stop it or set KEYCAP_CLUSTER_PORT"
  fi
  local p addrs=() bus=()
  # Redis 7 lets the cluster bus have a port of its own: the default, the
  # node's port + 10000, lies in Linux's ephemeral range (32768-60999), where
  # any outgoing connection may hold it. Below it, it does not.
  if redis-server --version | grep -q 'v=[7-9]'; then
    bus=(--cluster-port)
  fi
  mkdir -p "$DIR/cluster"
  touch "$DIR/cluster/started-by-us" # so that down stops a half-started cluster
  for p in $(seq "$CPORT" $((CPORT + 5))); do
    rping 127.0.0.1 "$p" && die "port $p is taken; set KEYCAP_CLUSTER_PORT"
    mkdir -p "$DIR/cluster/$p"
    rm -f "$DIR/cluster/$p/nodes.conf"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$p" ${bus:+"${bus[@]}" $((p > 20000 ? p - 10000 : p + 10000))} \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --save "" --appendonly no --dir "$DIR/cluster/$p" \
      --pidfile "$DIR/cluster/$p/redis.pid" --logfile "$DIR/cluster/$p/redis.log"
    addrs+=("127.0.0.1:$p")
  done
  for p in $(seq "$CPORT" $((CPORT + 5))); do
    wait_for 10 rping 127.0.0.1 "$p" || die "cluster node $p did not start"
  done
  log "creating Redis Cluster (3 masters, 3 replicas) on ports $CPORT-$((CPORT + 5))"
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/cluster/create.log" 2>&1 \
    || die "redis-cli --cluster create failed (see $DIR/cluster/create.log)"
  wait_for 30 cluster_ok || die "cluster did not become ready"
}

sentinel_ok() {
  redis-cli -p "$SPORT" sentinel get-master-addr-by-name "$SMASTER" 2>/dev/null | grep -q .
}

sentinel_up() {
  if rping 127.0.0.1 "$SPORT"; then
    sentinel_ok || die "port $SPORT answers but is not a sentinel watching $SMASTER; set KEYCAP_SENTINEL_PORT"
    log "Redis Sentinel already running on port $SPORT"
    return
  fi
  local host=${REDIS_ADDR%:*} port=${REDIS_ADDR##*:}
  mkdir -p "$DIR/sentinel"
  cat >"$DIR/sentinel/sentinel.conf" <<CONF
port $SPORT
bind 127.0.0.1
daemonize yes
pidfile $DIR/sentinel/redis.pid
logfile $DIR/sentinel/sentinel.log
dir $DIR/sentinel
sentinel monitor $SMASTER $host $port 1
sentinel down-after-milliseconds $SMASTER 5000
CONF
  log "starting Redis Sentinel on port $SPORT"
  redis-server "$DIR/sentinel/sentinel.conf" --sentinel
  wait_for 10 sentinel_ok || die "sentinel did not start (see $DIR/sentinel/sentinel.log)"
  touch "$DIR/sentinel/started-by-us"
}

pg_ok() { psql "$1" -Atqc 'select 1' >/dev/null 2>&1; }

# as_pg runs a command as the postgres user when we are root (initdb refuses
# to run as root), and as ourselves otherwise.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_up() {
  command -v psql >/dev/null || apt_install postgresql postgresql-client
  # The server's binaries too, whichever server answers: the safety checker
  # (internal/safety) starts, kills and restarts a PostgreSQL of its own.
  command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
  local own="postgres://postgres@127.0.0.1:$PGPORT_OWN/postgres?sslmode=disable"
  if [ -n "$PG_SYSTEM" ] && pg_ok "postgres://postgres@$PG_SYSTEM/postgres?sslmode=disable"; then
    PG_BASE="postgres://postgres@$PG_SYSTEM"
    log "PostgreSQL already answers on $PG_SYSTEM"
  elif pg_ok "$own"; then
    PG_BASE="postgres://postgres@127.0.0.1:$PGPORT_OWN"
    log "PostgreSQL already answers on 127.0.0.1:$PGPORT_OWN"
  else
    local bin
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -x "$bin/initdb" ] || apt_install postgresql
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    chmod 755 "$DIR"
    mkdir -p "$DIR/pg"
    [ "$(id -u)" = 0 ] && chown postgres "$DIR/pg"
    log "starting PostgreSQL on 127.0.0.1:$PGPORT_OWN"
    as_pg "$bin/initdb" -D "$DIR/pg/data" -A trust -U postgres >"$DIR/pg/initdb.log" 2>&1 \
      || die "initdb failed (see $DIR/pg/initdb.log)"
    as_pg "$bin/pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/postgres.log" -w \
      -o "-p $PGPORT_OWN -k $DIR/pg -c listen_addresses=127.0.0.1 -c max_connections=300" start >&2 \
      || die "PostgreSQL did not start (see $DIR/pg/postgres.log)"
    echo "$bin" >"$DIR/pg/started-by-us"
    PG_BASE="postgres://postgres@127.0.0.1:$PGPORT_OWN"
  fi
  if ! pg_ok "$PG_BASE/keycap_test?sslmode=disable"; then
    psql "$PG_BASE/postgres?sslmode=disable" -qc 'CREATE DATABASE keycap_test' >&2
  fi
}

stop_pidfile() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

down() {
  if [ -f "$DIR/pg/started-by-us" ]; then
    log "stopping PostgreSQL"
    as_pg "$(cat "$DIR/pg/started-by-us")/pg_ctl" -D "$DIR/pg/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$DIR/pg"
  fi
  if [ -f "$DIR/sentinel/started-by-us" ]; then
    log "stopping Redis Sentinel"
    stop_pidfile "$DIR/sentinel/redis.pid"
    rm -rf "$DIR/sentinel"
  fi
  if [ -f "$DIR/cluster/started-by-us" ]; then
    log "stopping Redis Cluster"
    for f in "$DIR"/cluster/*/redis.pid; do stop_pidfile "$f"; done
    rm -rf "$DIR/cluster"
  fi
  if [ -f "$DIR/redis/started-by-us" ]; then
    log "stopping Redis"
    stop_pidfile "$DIR/redis/redis.pid"
    rm -rf "$DIR/redis"
  fi
}

up() {
  mkdir -p "$DIR"
  redis_up
  cluster_up
  sentinel_up
  pg_up
  local seeds
  seeds=$(seq -s, -f "127.0.0.1:%g" "$CPORT" $((CPORT + 5)))
  echo "export KEYCAP_REDIS_ADDR=$REDIS_ADDR"
  echo "export KEYCAP_REDIS_CLUSTER=$seeds"
  echo "export KEYCAP_REDIS_SENTINEL=127.0.0.1:$SPORT"
  echo "export KEYCAP_REDIS_SENTINEL_MASTER=$SMASTER"
  echo "export KEYCAP_POSTGRES_URL='$PG_BASE/keycap_test?sslmode=disable'"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
