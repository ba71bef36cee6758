#!/usr/bin/env bash
# A sparse file: a 1 GiB disk image holding 10 MiB of data (ten 1 MiB runs of random bytes,
# spread out), sent by `sluice send` against `tar -S | nc` and an rsync daemon with `-S`, on
# loopback. For each: seconds, bytes on the wire (sluice: its --stats=json `bytes_sent`; tar:
# the bytes nc carried, counted by `wc -c` on a tee; rsync: its "Total bytes sent"), and what
# the copy allocates at the receiver (`du --block-size=1`).
#
# Rounds alternate (ROUNDS, default 3); each run writes into a directory never used before.
#
#   Benchmarks/sparse.sh
#   SIZE_MIB=4096 DATA_MIB=40 Benchmarks/sparse.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-3}
SIZE_MIB=${SIZE_MIB:-1024}
DATA_MIB=${DATA_MIB:-10}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}

need() { command -v "$1" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need nc netcat-openbsd
need rsync rsync
[ -x "$ROOT/.build/release/sluice" ] || swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice

mkdir -p "$DATA"
SRC=$DATA/sparse-$SIZE_MIB-$DATA_MIB
IMG=$SRC/disk.img
if [ ! -s "$SRC.complete" ]; then
    rm -rf "$SRC"
    mkdir -p "$SRC"
    truncate -s "${SIZE_MIB}M" "$IMG"
    step=$((SIZE_MIB / DATA_MIB))
    for i in $(seq 0 $((DATA_MIB - 1))); do
        head -c 1048576 /dev/urandom | dd of="$IMG" bs=1M seek=$((i * step)) conv=notrunc status=none
    done
    echo done >"$SRC.complete"
fi
RUNS=$(mktemp -d "$DATA/sparse-runs.XXXX")
trap 'rm -rf "$RUNS"' EXIT

# shellcheck source=Benchmarks/common.sh
. "$ROOT/Benchmarks/common.sh"
allocated() { du --block-size=1 -s "$1" | cut -f1; }

run_sluice() { # $1: destination directory; prints seconds wire allocated
    local dst=$1 port log t0 t1 wire
    mkdir -p "$dst"
    log=$RUNS/receive.log
    "$SLUICE" receive --insecure --no-fsync --once --listen 127.0.0.1:0 --dir "$dst" 2>"$log" &
    local pid=$!
    for _ in $(seq 500); do
        port=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2 || true)
        [ -n "$port" ] && break
        sleep 0.01
    done
    t0=$(now)
    wire=$("$SLUICE" send --insecure --no-progress --stats=json "$IMG" "127.0.0.1:$port" 2>&1 >/dev/null |
        grep -o '"bytes_sent":[0-9]*' | cut -d: -f2)
    wait "$pid"
    t1=$(now)
    cmp "$IMG" "$dst/disk.img"
    echo "$(elapsed "$t0" "$t1") $wire $(allocated "$dst/disk.img")"
}

run_tar() {
    local dst=$1 port t0 t1
    mkdir -p "$dst"
    port=$(free_port)
    (nc -l 127.0.0.1 "$port" | tee >(wc -c >"$RUNS/tar.wire") | tar xSf - -C "$dst") &
    local pid=$!
    wait_port "$port"
    t0=$(now)
    tar cSf - -C "$SRC" disk.img | nc -N 127.0.0.1 "$port"
    wait "$pid"
    t1=$(now)
    sleep 0.1
    cmp "$IMG" "$dst/disk.img"
    echo "$(elapsed "$t0" "$t1") $(cat "$RUNS/tar.wire") $(allocated "$dst/disk.img")"
}

run_rsync() {
    local dst=$1 port t0 t1 wire
    mkdir -p "$dst"
    port=$(free_port)
    cat >"$RUNS/rsyncd.conf" <<EOF
pid file = $RUNS/rsyncd.pid
use chroot = no
[m]
path = $dst
read only = no
uid = root
gid = root
EOF
    rsync --daemon --config="$RUNS/rsyncd.conf" --port="$port" --address=127.0.0.1
    wait_port "$port"
    t0=$(now)
    wire=$(rsync -aS --stats "$IMG" "rsync://127.0.0.1:$port/m/" | awk '/Total bytes sent/ {gsub(",", "", $4); print $4}')
    t1=$(now)
    kill "$(cat "$RUNS/rsyncd.pid")"
    cmp "$IMG" "$dst/disk.img"
    echo "$(elapsed "$t0" "$t1") $wire $(allocated "$dst/disk.img")"
}

cat "$IMG" >/dev/null
echo "source: $(du --apparent-size --block-size=1 -s "$IMG" | cut -f1) bytes, $(allocated "$IMG") allocated"
printf '%-6s %-7s %9s %14s %14s\n' round row seconds "wire bytes" "allocated"
for round in $(seq "$ROUNDS"); do
    for row in sluice tar rsync; do
        sync
        read -r s w a < <("run_$row" "$RUNS/$row-$round")
        printf '%-6s %-7s %9s %14s %14s\n' "$round" "$row" "$s" "$w" "$a"
    done
done
echo "machine: $(nproc) cores, $(uname -r), $(swift --version 2>/dev/null | head -1)"
