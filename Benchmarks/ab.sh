#!/usr/bin/env bash
# Two builds of sluice against each other on one job: a 1 GiB `send` → `receive --once` over
# TLS 1.3 with a key file, on loopback, alternating rounds (OLD first), each into a directory
# never used before. Prints per round: build, wall seconds (receiver start to exit), CPU seconds
# of both ends (user + system).
#
#   OLD=/path/to/old/sluice NEW=.build/release/sluice ROUNDS=6 Benchmarks/ab.sh
#
# Build the old one from a worktree: git worktree add /tmp/old COMMIT && (cd /tmp/old &&
# swift build -c release --product sluice).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${OLD:?OLD=path of the old sluice binary}
NEW=${NEW:-$PWD/.build/release/sluice}
ROUNDS=${ROUNDS:-5}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
mkdir -p "$DATA"
SRC=$DATA/random-1024M.bin
[ -s "$SRC" ] || head -c $((1 << 30)) /dev/urandom >"$SRC"
KEY=$DATA/ab.key
[ -f "$KEY" ] || "$NEW" keygen "$KEY" >/dev/null
run() {
    local bin=$1 dir
    dir=$(mktemp -d "$DATA/ab.XXXXXX")
    local port=$((20000 + RANDOM % 20000))
    local t0 t1
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$dir.rt" "$bin" receive --key-file "$KEY" --once --listen 127.0.0.1:$port \
        --dir "$dir" -q 2>/dev/null &
    local rp=$!
    for _ in $(seq 200); do ss -ltn | grep -q ":$port " && break; sleep 0.01; done
    /usr/bin/time -f "%U %S" -o "$dir.st" "$bin" send --key-file "$KEY" -q "$SRC" 127.0.0.1:$port 2>/dev/null
    wait $rp
    t1=$(date +%s.%N)
    echo "$(echo "$t1 - $t0" | bc) $(cat "$dir.rt" "$dir.st" | awk '{s += $1 + $2} END {print s}')"
    rm -rf "$dir" "$dir.rt" "$dir.st"
}
for _ in $(seq "$ROUNDS"); do
    echo "old $(run "$OLD")"
    echo "new $(run "$NEW")"
done
