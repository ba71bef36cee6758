#!/usr/bin/env bash
# `sluice bench -P` on loopback (issue 15): one stream against STREAMS (default 4), and both
# against iperf3 with the same -P, in the same run, alternating.
#
#   Benchmarks/parallel.sh                    # ROUNDS=5 SECONDS_NET=5 STREAMS=4
#   ROUNDS=3 SECONDS_NET=3 Benchmarks/parallel.sh
#
# Each round runs, one after the other: sluice -P 1, sluice -P STREAMS, iperf3 -P 1,
# iperf3 -P STREAMS (the order rotates from round to round, so that a noisy spell on the
# shared machine does not fall on one of them only), each against a fresh `--once` / `-s -1`
# server on a free port, 1 MiB writes (`-b 1M`, `iperf3 -l 1M`). Every run is kept. Prints
# each rate, then the median and range of each, and of the client's CPU seconds per GiB (sluice's
# own figure; iperf3's from its cpu_utilization_percent host_total × seconds / GiB), as a
# Markdown table for RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-5}
SECONDS_NET=${SECONDS_NET:-5}
STREAMS=${STREAMS:-4}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
command -v iperf3 >/dev/null || { apt-get update -qq && apt-get install -y -qq iperf3 >/dev/null; }
swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice
mkdir -p "$DATA"
LOG=$DATA/parallel.log
: >"$LOG"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 250); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.02
    done
    echo "nothing listens on port $1" >&2
    return 1
}

# "MB/s CPU-s-per-GiB" of one run.
run_sluice() {
    local port out
    port=$(free_port)
    "$SLUICE" bench --listen "127.0.0.1:$port" --once --json >>"$LOG" 2>&1 &
    wait_port "$port"
    out=$("$SLUICE" bench "tcp:127.0.0.1:$port" -P "$1" -b 1M --seconds "$SECONDS_NET" --json)
    wait
    echo "$out" >>"$LOG"
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["bytes_per_second"]/1e6, d["cpu_seconds_per_gib"])' "$out"
}
run_iperf() {
    local port out
    port=$(free_port)
    iperf3 -s -1 -p "$port" -B 127.0.0.1 >>"$LOG" 2>&1 &
    wait_port "$port"
    out=$(iperf3 -c 127.0.0.1 -p "$port" -P "$1" -l 1M -t "$SECONDS_NET" -J)
    wait || true
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])["end"]
received = d["sum_received"]
cpu = d["cpu_utilization_percent"]["host_total"] / 100 * d["sum_sent"]["seconds"]
print(received["bits_per_second"] / 8e6, cpu / (d["sum_sent"]["bytes"] / 2**30))' "$out"
}

names=("sluice -P 1" "sluice -P $STREAMS" "iperf3 -P 1" "iperf3 -P $STREAMS")
declare -A rates cpus
for round in $(seq "$ROUNDS"); do
    for k in 0 1 2 3; do
        i=$(((k + round - 1) % 4))
        case $i in
            0) read -r r c <<<"$(run_sluice 1)" ;;
            1) read -r r c <<<"$(run_sluice "$STREAMS")" ;;
            2) read -r r c <<<"$(run_iperf 1)" ;;
            3) read -r r c <<<"$(run_iperf "$STREAMS")" ;;
        esac
        rates[$i]="${rates[$i]:-} $r"
        cpus[$i]="${cpus[$i]:-} $c"
        printf 'round %d  %-14s %9.1f MB/s  %6.3f CPU s/GiB\n' "$round" "${names[$i]}" "$r" "$c"
    done
done

stats() {
    python3 - "$1" "$2" <<'EOF'
import statistics, sys
v = [float(x) for x in sys.argv[2].split()]
d = int(sys.argv[1])
print(f"{statistics.median(v):.{d}f} ({min(v):.{d}f}–{max(v):.{d}f})")
EOF
}
echo
echo "| run | MB/s, median (range) | client CPU s per GiB, median (range) |"
echo "|---|---|---|"
for i in 0 1 2 3; do
    echo "| \`${names[$i]}\` | $(stats 0 "${rates[$i]}") | $(stats 3 "${cpus[$i]}") |"
done
ratio() {
    python3 - "$1" "$2" <<'EOF'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
r = [x / y for x, y in zip(a, b)]
print(f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})")
EOF
}
echo
echo "Per round: sluice -P $STREAMS / iperf3 -P $STREAMS rate $(ratio "${rates[1]}" "${rates[3]}");" \
    "sluice -P $STREAMS / sluice -P 1 $(ratio "${rates[1]}" "${rates[0]}");" \
    "sluice -P 1 / iperf3 -P 1 $(ratio "${rates[0]}" "${rates[2]}")."
