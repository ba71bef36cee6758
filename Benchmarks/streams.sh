#!/usr/bin/env bash
# `sluice send --streams 4` against one stream through a relay that caps each connection at
# RATE (default 20M = 20 MiB/s), as a link with per-flow shaping does (issue 15: target
# >= 3.5x one stream).
#
#   Benchmarks/streams.sh                 # ROUNDS=3 SIZE_MB=256 RATE=20M STREAMS=4
#   ROUNDS=5 SIZE_MB=512 Benchmarks/streams.sh
#   AUTH=1 Benchmarks/streams.sh          # TLS 1.3 with a key file instead of --insecure
#
# The relay is socat (TCP-LISTEN,fork: one process per connection) running, through SYSTEM, for each
# connection, `sluice copy --rate-limit RATE - -` on the sender-to-receiver direction and a
# plain `socat` back (the receiver's answers are small). Each round sends the same SIZE_MB
# file once with one stream and once with STREAMS, alternating which goes first; every run
# is kept (none dropped). Prints the times, the ratio one-stream / N-streams per round, and
# its median and range, as a Markdown section for RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-3}
SIZE_MB=${SIZE_MB:-256}
RATE=${RATE:-20M}
STREAMS=${STREAMS:-4}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
command -v socat >/dev/null || { apt-get update -qq && apt-get install -y -qq socat >/dev/null; }
swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice
mkdir -p "$DATA"
SRC=$DATA/random-${SIZE_MB}M.bin
[ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
cat "$SRC" >/dev/null
RECV=$DATA/streams-recv
AUTH_ARGS=(--insecure)
if [ "${AUTH:-0}" = 1 ]; then
    rm -f "$DATA/bench.key"
    "$SLUICE" keygen "$DATA/bench.key"
    AUTH_ARGS=(--key-file "$DATA/bench.key")
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 250); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.02
    done
    echo "nothing listens on port $1" >&2
    return 1
}
now() { date +%s.%N; }

PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

# A receiver serving on (not --once: both kinds of runs use it), behind the capped relay.
RECV_PORT=$(free_port)
RELAY_PORT=$(free_port)
rm -rf "$RECV" && mkdir -p "$RECV"
"$SLUICE" receive "${AUTH_ARGS[@]}" --quiet --no-fsync --overwrite --listen "127.0.0.1:$RECV_PORT" \
    --dir "$RECV" 2>"$DATA/streams-receive.log" &
PIDS+=($!)
wait_port "$RECV_PORT"
socat -t 5 "TCP-LISTEN:$RELAY_PORT,bind=127.0.0.1,reuseaddr,fork" \
    "SYSTEM:$SLUICE copy -q --rate-limit $RATE - - | socat -t 5 - TCP\:127.0.0.1\:$RECV_PORT" &
PIDS+=($!)
wait_port "$RELAY_PORT"

# One send; prints its wall time in seconds.
run() {
    local streams=$1
    rm -f "$RECV/$(basename "$SRC")"
    local start end
    start=$(now)
    "$SLUICE" send "${AUTH_ARGS[@]}" -q --streams "$streams" "$SRC" "127.0.0.1:$RELAY_PORT" \
        2>"$DATA/streams-send.log" || { cat "$DATA/streams-send.log" >&2; exit 1; }
    end=$(now)
    cmp -s "$SRC" "$RECV/$(basename "$SRC")" || { echo "streams=$streams: the file differs" >&2; exit 1; }
    echo "$end - $start" | bc -l
}

ratios=()
rows=()
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
        one=$(run 1)
        many=$(run "$STREAMS")
    else
        many=$(run "$STREAMS")
        one=$(run 1)
    fi
    ratio=$(echo "$one / $many" | bc -l)
    ratios+=("$ratio")
    rows+=("$(printf '| %d | %.2f | %.2f | %.2f |' "$round" "$one" "$many" "$ratio")")
done

sorted=$(printf '%s\n' "${ratios[@]}" | sort -g)
median=$(echo "$sorted" | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
low=$(echo "$sorted" | head -1)
high=$(echo "$sorted" | tail -1)

echo "### send --streams $STREAMS through a relay capping each connection at $RATE/s"
echo
mode="plaintext (--insecure)"
[ "${AUTH:-0}" = 1 ] && mode="authenticated (TLS 1.3, key file)"
echo "$(nproc) cores, $(uname -r), shared with other engineers' builds; ${SIZE_MB} MiB file, $mode, receiver --no-fsync; $ROUNDS alternating rounds, none dropped."
echo
echo "| round | 1 stream (s) | $STREAMS streams (s) | ratio |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf 'ratio (1 stream / %d streams): median %.2f, range %.2f-%.2f (target >= 3.5)\n' "$STREAMS" "$median" "$low" "$high"
