#!/usr/bin/env bash
# Memory of a delta by file size (issue 40: "receiver memory for signatures of a 100 GiB file
# bounded, streamed, not held: RSS ≤ 64 MiB"): for each size in SIZES_MIB, a file of random
# bytes the receiver already has, and the sender's version of it with CHANGES 64 KiB blocks
# rewritten at random places; `sluice send --sync` (a delta) to `sluice receive --once`, on
# loopback, plaintext. Printed per size: the peak RSS of both ends (`/usr/bin/time -f %M`), the
# seconds, and the bytes on the wire both ways (signatures included) as a share of the file.
# If memory held the signatures, the receiver's peak would grow with the size (a 100 GiB
# file has 819,200 blocks of 128 KiB, 9.4 MiB of 12-byte signatures); streamed, it stays flat.
#
#   Benchmarks/delta-memory.sh                       # SIZES_MIB="1024 4096 16384", CHANGES=16
#   SIZES_MIB="256 1024" Benchmarks/delta-memory.sh
#
# Needs twice the largest size free on $SLUICE_BENCH_DATA (default /tmp/sluice-bench-data);
# both files are deleted after each size.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SIZES_MIB=${SIZES_MIB:-1024 4096 16384}
CHANGES=${CHANGES:-16}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
[ -x "$ROOT/.build/release/sluice" ] || swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice
# shellcheck source=Benchmarks/common.sh
. "$ROOT/Benchmarks/common.sh"
mkdir -p "$DATA"
WORK=$(mktemp -d "$DATA/delta-memory.XXXX")
trap 'rm -rf "$WORK"' EXIT

echo "| file | receiver peak RSS | sender peak RSS | seconds | on the wire (both ways) |"
echo "|---|---|---|---|---|"
for mib in $SIZES_MIB; do
    mkdir -p "$WORK/src" "$WORK/dst"
    head -c "$((mib << 20))" /dev/urandom >"$WORK/dst/file.bin"
    cp "$WORK/dst/file.bin" "$WORK/src/file.bin"
    python3 - "$WORK/src/file.bin" "$CHANGES" <<'EOF'
import os, random, sys
path, changes = sys.argv[1], int(sys.argv[2])
blocks = os.path.getsize(path) // 65536
rng = random.Random(40)
with open(path, "r+b") as f:
    for block in rng.sample(range(blocks), min(changes, blocks)):
        f.seek(block * 65536)
        f.write(os.urandom(65536))
EOF
    touch -d '2026-01-01 00:00:00' "$WORK/dst/file.bin"
    sync
    port=$(free_port)
    /usr/bin/time -f %M -o "$WORK/receiver.rss" "$SLUICE" receive -q --insecure --once \
        --listen "127.0.0.1:$port" --dir "$WORK/dst" 2>/dev/null &
    pid=$!
    wait_port "$port"
    t0=$(date +%s.%N)
    /usr/bin/time -f %M -o "$WORK/sender.rss" "$SLUICE" send --insecure --sync --stats=json \
        "$WORK/src/file.bin" "127.0.0.1:$port" 2>"$WORK/stats.json"
    wait "$pid"
    t1=$(date +%s.%N)
    cmp -s "$WORK/src/file.bin" "$WORK/dst/file.bin" || { echo "delta-memory.sh: the copies differ" >&2 && exit 1; }
    grep -q '"deltas":1' "$WORK/stats.json" || { echo "delta-memory.sh: not sent as a delta: $(cat "$WORK/stats.json")" >&2 && exit 1; }
    wire=$(python3 -c 'import json,sys; s=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(s["bytes_sent"] + s["bytes_received"])' "$WORK/stats.json")
    printf '| %s MiB | %.1f MiB | %.1f MiB | %.1f | %s bytes (%.3f %%) |\n' "$mib" \
        "$(echo "$(tail -n 1 "$WORK/receiver.rss") / 1024" | bc -l)" \
        "$(echo "$(tail -n 1 "$WORK/sender.rss") / 1024" | bc -l)" \
        "$(echo "$t1 - $t0" | bc -l)" "$wire" "$(echo "100 * $wire / ($mib * 1048576)" | bc -l)"
    rm -rf "$WORK/src" "$WORK/dst"
done
echo
echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r); $("$SLUICE" --version | head -n 1)."
