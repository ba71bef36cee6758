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
# With SPARSE=1 the files are sparse, as a VM disk image is: each holds 1 MiB of random bytes
# at the start of every GiB and holes elsewhere, and the sender's has CHANGES 64 KiB blocks
# rewritten within those MiBs. The copies are compared by their data (`compare_sparse` below),
# and the allocated size of the result and of the source (`du`) is printed: a delta keeps the
# old file's holes.
#
#   Benchmarks/delta-memory.sh                       # SIZES_MIB="1024 4096 16384", CHANGES=16
#   SIZES_MIB="256 1024" Benchmarks/delta-memory.sh
#   SPARSE=1 Benchmarks/delta-memory.sh              # SIZES_MIB="102400": 100 GiB, 100 MiB of data
#
# Needs twice the largest size free on $SLUICE_BENCH_DATA (default /tmp/sluice-bench-data),
# with SPARSE=1 twice its data; both files are deleted after each size.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SPARSE=${SPARSE:-0}
if [ "$SPARSE" = 1 ]; then SIZES_MIB=${SIZES_MIB:-102400}; else SIZES_MIB=${SIZES_MIB:-1024 4096 16384}; fi
CHANGES=${CHANGES:-16}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
[ -x "$ROOT/.build/release/sluice" ] || swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice
# shellcheck source=Benchmarks/common.sh
. "$ROOT/Benchmarks/common.sh"
mkdir -p "$DATA"
WORK=$(mktemp -d "$DATA/delta-memory.XXXX")
trap 'rm -rf "$WORK"' EXIT

# $4 blocks of 64 KiB rewritten at random in $2, the sender's copy of $1 (the receiver's). With
# $5 = 1, both files are made first, sparse, $3 MiB, 1 MiB of random data at each GiB, and the
# changed blocks are within those MiBs; else $2 is there, a copy of $1.
change_files() {
    python3 - "$@" <<'PY'
import os, random, sys
old, new, mib, changes, sparse = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
rng = random.Random(40)
if sparse:
    regions = [gib << 30 for gib in range(max(1, mib >> 10))]
    for path in (old, new):
        with open(path, "wb") as f:
            f.truncate(mib << 20)
    for offset in regions:
        data = os.urandom(1 << 20)
        for path in (old, new):
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(data)
    blocks = [offset + i * 65536 for offset in regions for i in range(16)]
else:
    blocks = [i * 65536 for i in range(os.path.getsize(new) // 65536)]
with open(new, "r+b") as f:
    for block in rng.sample(blocks, min(changes, len(blocks))):
        f.seek(block)
        f.write(os.urandom(65536))
PY
}

# Whether the files $1 and $2 hold the same bytes, reading only their data: the union of both
# files' data runs (SEEK_DATA, SEEK_HOLE) is compared byte by byte, and outside it both read
# as zeros (a file system may report a hole as data, never data as a hole). `cmp` would read
# 100 GiB of holes twice for the same answer.
compare_sparse() {
    python3 - "$1" "$2" <<'PY'
import os, sys
a, b = (os.open(p, os.O_RDONLY) for p in sys.argv[1:3])
size = os.fstat(a).st_size
if os.fstat(b).st_size != size:
    sys.exit(1)
def runs(fd):
    out, at = [], 0
    while at < size:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, end))
        at = end
    return out
for start, end in runs(a) + runs(b):
    at = start
    while at < end:
        n = min(8 << 20, end - at)
        if os.pread(a, n, at) != os.pread(b, n, at):
            sys.exit(1)
        at += n
PY
}

mib_of_kib() { echo "$1 / 1024" | bc -l; }

if [ "$SPARSE" = 1 ]; then
    echo "| file (data) | receiver peak RSS | sender peak RSS | seconds | on the wire (both ways) | allocated: result (source) |"
    echo "|---|---|---|---|---|---|"
else
    echo "| file | receiver peak RSS | sender peak RSS | seconds | on the wire (both ways) |"
    echo "|---|---|---|---|---|"
fi
for mib in $SIZES_MIB; do
    mkdir -p "$WORK/src" "$WORK/dst"
    if [ "$SPARSE" != 1 ]; then
        head -c "$((mib << 20))" /dev/urandom >"$WORK/dst/file.bin"
        cp "$WORK/dst/file.bin" "$WORK/src/file.bin"
    fi
    change_files "$WORK/dst/file.bin" "$WORK/src/file.bin" "$mib" "$CHANGES" "$SPARSE"
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
    if [ "$SPARSE" = 1 ]; then
        compare_sparse "$WORK/src/file.bin" "$WORK/dst/file.bin" || { echo "delta-memory.sh: the copies differ" >&2 && exit 1; }
    else
        cmp -s "$WORK/src/file.bin" "$WORK/dst/file.bin" || { echo "delta-memory.sh: the copies differ" >&2 && exit 1; }
    fi
    grep -q '"deltas":1' "$WORK/stats.json" || { echo "delta-memory.sh: not sent as a delta: $(cat "$WORK/stats.json")" >&2 && exit 1; }
    wire=$(python3 -c 'import json,sys; s=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(s["bytes_sent"] + s["bytes_received"])' "$WORK/stats.json")
    file="$mib MiB"
    [ "$SPARSE" = 1 ] && file+=" ($(( mib >> 10 > 0 ? mib >> 10 : 1 )) MiB)"
    printf '| %s | %.1f MiB | %.1f MiB | %.1f | %s bytes (%.3f %%) |' "$file" \
        "$(mib_of_kib "$(tail -n 1 "$WORK/receiver.rss")")" "$(mib_of_kib "$(tail -n 1 "$WORK/sender.rss")")" \
        "$(echo "$t1 - $t0" | bc -l)" "$wire" "$(echo "100 * $wire / ($mib * 1048576)" | bc -l)"
    if [ "$SPARSE" = 1 ]; then
        printf ' %.1f MiB (%.1f MiB) |' "$(mib_of_kib "$(du -k "$WORK/dst/file.bin" | cut -f1)")" \
            "$(mib_of_kib "$(du -k "$WORK/src/file.bin" | cut -f1)")"
    fi
    echo
    rm -rf "$WORK/src" "$WORK/dst"
done
echo
echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r); $("$SLUICE" --version | head -n 1)."
