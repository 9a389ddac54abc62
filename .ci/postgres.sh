#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the results store's tests (docs/results-store.md).
#   .ci/postgres.sh start DIR   initdb into DIR/data, start it on a unix socket in DIR (no TCP port),
#                               create database convperf; prints the store URL on stdout
#   .ci/postgres.sh stop DIR    stop it (fast shutdown); DIR is the caller's to remove
# Debian's postgresql package (binaries in /usr/lib/postgresql/<major>/bin). As root, the cluster
# runs as the postgres user (PostgreSQL refuses to run as root); trust auth on the socket only.
set -euo pipefail
cmd=${1:?start|stop}
dir=$(realpath -m "${2:?folder for the cluster}")
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/pg_ctl" ]; then
    echo "postgres.sh: PostgreSQL is not installed (apt-get install -y postgresql)" >&2
    exit 1
fi
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
user=$([ "$(id -u)" = 0 ] && echo postgres || id -un)
case "$cmd" in
    start)
        mkdir -p "$dir"
        [ "$(id -u)" = 0 ] && chown postgres: "$dir"
        as_owner "$bin/initdb" -D "$dir/data" -U "$user" --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
            || { cat "$dir/initdb.log" >&2; exit 1; }
        # No TCP listener: a unix socket in DIR, so parallel CI runs never collide on a port.
        as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
            -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off -c max_connections=64" start >&2 \
            || { cat "$dir/server.log" >&2; exit 1; }
        as_owner "$bin/createdb" -h "$dir" -U "$user" convperf
        echo "postgresql://$user@/convperf?host=$dir"
        ;;
    stop)
        [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
        ;;
    *)
        echo "postgres.sh: start|stop, not $cmd" >&2
        exit 2
        ;;
esac
