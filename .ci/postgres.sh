#!/usr/bin/env bash
# Throwaway PostgreSQL server for the distributed-sweep tests (tests/test_postgres.py).
#
#   eval "$(bash .ci/postgres.sh)"      # start (or reuse) it; exports EXPLORER_TEST_PG_URL
#   bash .ci/postgres.sh stop           # stop it and delete its data folder
#
# Listens on 127.0.0.1 only, port $EXPLORER_PG_PORT (default 55432), data in a temporary folder,
# trust authentication (test data only).  Installs the server with apt-get when no initdb/pg_ctl is
# found.  PostgreSQL refuses to run as root, so as root the server runs as the 'postgres' user
# (created if missing).  Only the export line goes to stdout; progress goes to stderr.
set -euo pipefail

PORT="${EXPLORER_PG_PORT:-55432}"
DATA="${EXPLORER_PG_DIR:-${TMPDIR:-/tmp}/explorer-pg-$PORT}"
DB="${EXPLORER_PG_DB:-explorer_test}"
log() { echo "postgres.sh: $*" >&2; }

find_bin() {
  local name=$1 d
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/$name" ]; then echo "$d/$name"; return 0; fi
  done
  return 1
}

if ! find_bin initdb >/dev/null || ! find_bin pg_ctl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing postgresql with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  else
    log "initdb/pg_ctl not found; install PostgreSQL (e.g. apt-get install postgresql) and retry"
    exit 1
  fi
fi
INITDB=$(find_bin initdb)
PG_CTL=$(find_bin pg_ctl)
CREATEDB=$(find_bin createdb || true)
PSQL=$(find_bin psql || true)

if [ "$(id -u)" = 0 ]; then
  RUNAS=postgres
  if ! id "$RUNAS" >/dev/null 2>&1; then
    log "creating system user $RUNAS"
    useradd --system --no-create-home --shell /bin/bash "$RUNAS"
  fi
  as_pg() { su "$RUNAS" -s /bin/sh -c "$*"; }
else
  as_pg() { sh -c "$*"; }
fi

if [ "${1:-start}" = stop ]; then
  if [ -f "$DATA/PG_VERSION" ]; then
    as_pg "'$PG_CTL' -D '$DATA' -m fast -w stop" >&2 || true
    rm -rf "$DATA"
    log "stopped and removed $DATA"
  fi
  exit 0
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  mkdir -p "$DATA"
  chmod 700 "$DATA"
  [ "$(id -u)" = 0 ] && chown "$RUNAS" "$DATA"
  log "initdb $DATA"
  as_pg "'$INITDB' -D '$DATA' -U postgres --auth=trust -E UTF8 --no-locale" >/dev/null
fi
if ! as_pg "'$PG_CTL' -D '$DATA' status" >/dev/null 2>&1; then
  log "starting on 127.0.0.1:$PORT"
  as_pg "'$PG_CTL' -D '$DATA' -l '$DATA/server.log' -w -t 60 \
    -o \"-p $PORT -k '$DATA' -c listen_addresses=127.0.0.1 -c max_connections=200\" start" >&2
fi
if [ -n "$PSQL" ] && [ "$(as_pg "'$PSQL' -h 127.0.0.1 -p $PORT -U postgres -tAc \"SELECT 1 FROM pg_database WHERE datname='$DB'\"")" != 1 ]; then
  as_pg "'$CREATEDB' -h 127.0.0.1 -p $PORT -U postgres '$DB'"
  log "created database $DB"
elif [ -z "$PSQL" ]; then
  as_pg "'$CREATEDB' -h 127.0.0.1 -p $PORT -U postgres '$DB'" 2>/dev/null || true
fi
echo "export EXPLORER_TEST_PG_URL=postgresql://postgres@127.0.0.1:$PORT/$DB"
