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
