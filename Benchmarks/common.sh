# Helpers shared by the benchmark scripts (sourced, not run): a clock, free loopback ports,
# and waiting for a listener.

# Seconds since the epoch, to the microsecond.
now() { echo "$EPOCHREALTIME"; }
# Seconds from $1 to $2, to the tenth of a millisecond.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", b - a}'; }
# A port free on 127.0.0.1 now (bound to port 0 and closed; retry if someone takes it first).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits (up to 5 s) until something listens on 127.0.0.1:$1.
wait_port() {
    for _ in $(seq 500); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.01
    done
    echo "$(basename "$0"): nothing listens on port $1" >&2
    return 1
}

# Starts `sluice receive --insecure --no-fsync --sync` (it may replace what a sync replaces; with
# RECEIVE_DELETE=1 also --delete, for a sender's --delete) into
# $1 (which must exist) on a free port, logging to $2; sets SPORT and appends its pid to PIDS.
start_sluice_receiver() {
    local delete=()
    [ "${RECEIVE_DELETE:-0}" = 1 ] && delete=(--delete)
    "$SLUICE" receive --insecure --no-fsync --sync "${delete[@]}" --listen 127.0.0.1:0 --dir "$1" 2>"$2" &
    PIDS+=($!)
    SPORT=
    for _ in $(seq 500); do
        SPORT=$(grep -o '127.0.0.1:[0-9]*' "$2" | head -1 | cut -d: -f2 || true)
        [ -n "$SPORT" ] && return 0
        sleep 0.01
    done
    echo "$(basename "$0"): the receiver printed no port" >&2
    return 1
}

# Starts an rsync daemon with one writable module `m` at $1, its files in $2; sets RPORT and
# appends its pid to PIDS.
start_rsync_daemon() {
    RPORT=$(free_port)
    cat >"$2/rsyncd.conf" <<CONF
pid file = $2/rsyncd.pid
use chroot = no
[m]
path = $1
read only = no
uid = root
gid = root
CONF
    rsync --daemon --config="$2/rsyncd.conf" --port="$RPORT" --address=127.0.0.1
    wait_port "$RPORT"
    PIDS+=("$(cat "$2/rsyncd.pid")")
}
