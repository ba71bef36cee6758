#!/usr/bin/env bash
# A changed large file sent again: `sluice send --sync` (a delta against the receiver's copy,
# the rsync algorithm) against `rsync -a` to an rsync daemon, on loopback.
#
# The file: SIZE_MIB (default 1024) of random bytes. The change: PERCENT (default 1) percent of
# its 64 KiB blocks, chosen at random, rewritten with new random bytes; PERCENT=0 touches only
# the mtime. Each round: each tool's copy of the old file is made fresh (`cp`, not timed),
# then each tool brings it up to the new file, alternating which goes first (an even number of
# rounds puts each first as often; with OLD, a multiple of four); the result is compared with
# `cmp`.
#
# Printed per round: seconds, and bytes on the wire both ways (sluice: its --stats=json
# bytes_sent + bytes_received, the signatures included; rsync: "Total bytes sent" +
# "Total bytes received"), as a percentage of the file; then the medians and ranges.
#
# With OLD=path of another sluice build, that build runs too, as a third tool with a receiver of
# its own (an A/B of two builds in one run; its ratio to this build's time is printed too).
#
#   Benchmarks/delta.sh                  # ROUNDS=4, 1 GiB, 1%, SETTLE=5 s before each round
#   PERCENT=0 Benchmarks/delta.sh
#   OLD=/tmp/old/.build/release/sluice Benchmarks/delta.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-4}
SIZE_MIB=${SIZE_MIB:-1024}
PERCENT=${PERCENT:-1}
SETTLE=${SETTLE:-5}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}

need() { command -v "$1" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need rsync rsync
[ -x "$ROOT/.build/release/sluice" ] || swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice
# shellcheck source=Benchmarks/common.sh
. "$ROOT/Benchmarks/common.sh"

OTHER=${OLD:-}
[ -z "$OTHER" ] || [ -x "$OTHER" ] || { echo "delta.sh: OLD=$OTHER is not an executable" >&2 && exit 64; }

mkdir -p "$DATA"
BEFORE=$DATA/delta-old-$SIZE_MIB.bin
[ -s "$BEFORE" ] || head -c "$((SIZE_MIB << 20))" /dev/urandom >"$BEFORE"
RUNS=$(mktemp -d "$DATA/delta-runs.XXXX")
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$RUNS"
}
trap cleanup EXIT

# The new file: the old one with PERCENT% of its 64 KiB blocks rewritten.
mkdir -p "$RUNS/src"
NEW=$RUNS/src/file.bin
cp "$BEFORE" "$NEW"
python3 - "$NEW" "$PERCENT" <<'EOF'
import os, random, sys
path, percent = sys.argv[1], float(sys.argv[2])
blocks = os.path.getsize(path) // 65536
rng = random.Random(42)
chosen = rng.sample(range(blocks), int(blocks * percent / 100))
with open(path, "r+b") as f:
    for b in chosen:
        f.seek(b * 65536)
        f.write(os.urandom(65536))
EOF
touch "$NEW"

TOOLS=(sluice rsync)
[ -z "$OTHER" ] || TOOLS+=(old)
mkdir -p "$RUNS/sluice" "$RUNS/rsync" "$RUNS/old"
start_sluice_receiver "$RUNS/sluice" "$RUNS/receive.log"
PORT_NEW=$SPORT
if [ -n "$OTHER" ]; then
    SLUICE=$OTHER start_sluice_receiver "$RUNS/old" "$RUNS/receive-old.log"
    PORT_OLD=$SPORT
fi
start_rsync_daemon "$RUNS/rsync" "$RUNS"

bytes=$(stat -c %s "$NEW")
percent() { awk -v a="$1" -v b="$bytes" 'BEGIN {printf "%.3f", 100 * a / b}'; }
# run_sluice [old]: this build, or the OLD one into its own receiver.
run_sluice() {
    local t0 t1 stats bin=$SLUICE port=$PORT_NEW dir=sluice
    [ "${1:-}" = old ] && bin=$OTHER port=$PORT_OLD dir=old
    t0=$(now)
    stats=$("$bin" send --insecure -q --sync --stats=json "$RUNS/src" "127.0.0.1:$port" 2>&1 | grep '^{')
    t1=$(now)
    cmp "$NEW" "$RUNS/$dir/src/file.bin"
    local sent received
    sent=$(echo "$stats" | grep -o '"bytes_sent":[0-9]*' | cut -d: -f2)
    received=$(echo "$stats" | grep -o '"bytes_received":[0-9]*' | cut -d: -f2)
    echo "$(elapsed "$t0" "$t1") $((sent + received))"
}
run_rsync() {
    local t0 t1 out
    t0=$(now)
    out=$(rsync -a --stats "$RUNS/src" "rsync://127.0.0.1:$RPORT/m/")
    t1=$(now)
    cmp "$NEW" "$RUNS/rsync/src/file.bin"
    local sent received
    sent=$(echo "$out" | awk '/Total bytes sent/ {gsub(",", "", $4); print $4}')
    received=$(echo "$out" | awk '/Total bytes received/ {gsub(",", "", $4); print $4}')
    echo "$(elapsed "$t0" "$t1") $((sent + received))"
}
ratios=()
olds=()
for round in $(seq "$ROUNDS"); do
    for tool in "${TOOLS[@]}"; do
        rm -rf "${RUNS:?}/$tool/src"
        mkdir -p "$RUNS/$tool/src"
        cp --preserve=mode "$BEFORE" "$RUNS/$tool/src/file.bin"
    done
    # Two tools alternate which goes first; three take four orders in turn, so each is first,
    # middle and last alike.
    if [ -z "$OTHER" ]; then
        order=("rsync sluice" "sluice rsync")
        order=${order[$((round % 2))]}
    else
        order=("old sluice rsync" "rsync sluice old" "sluice old rsync" "rsync old sluice")
        order=${order[$(((round - 1) % 4))]}
    fi
    for tool in $order; do
        # Writeback of the copies, the last round's removal and the tool before, out of the way
        # before each tool: on this VM whoever ran first after them took up to 2.5× as long.
        sync
        sleep "$SETTLE"
        case $tool in
            sluice) read -r st sw < <(run_sluice) ;;
            old) read -r ot ow < <(run_sluice old) ;;
            rsync) read -r rt rw < <(run_rsync) ;;
        esac
    done
    ratios+=("$(awk -v a="$st" -v b="$rt" 'BEGIN {printf "%.2f", a / b}')")
    echo "round $round: sluice ${st}s, $sw bytes on the wire ($(percent "$sw")%); rsync ${rt}s, $rw bytes ($(percent "$rw")%)"
    if [ -n "$OTHER" ]; then
        olds+=("$(awk -v a="$st" -v b="$ot" 'BEGIN {printf "%.3f", a / b}')")
        echo "round $round: old ${ot}s, $ow bytes on the wire; this build / old ${olds[-1]}"
    fi
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v p="$PERCENT" -v s="$SIZE_MIB" '{r[NR]=$1} END {
    m = (NR % 2) ? r[(NR+1)/2] : (r[NR/2] + r[NR/2+1]) / 2
    printf "%d MiB, %s%% of 64 KiB blocks changed: sluice / rsync seconds median %.2f (range %.2f–%.2f) over %d rounds\n", s, p, m, r[1], r[NR], NR }'
[ -z "$OTHER" ] || printf '%s\n' "${olds[@]}" | sort -n | awk '{r[NR]=$1} END {
    m = (NR % 2) ? r[(NR+1)/2] : (r[NR/2] + r[NR/2+1]) / 2
    printf "this build / OLD seconds median %.3f (range %.3f–%.3f) over %d rounds\n", m, r[1], r[NR], NR }'
echo "machine: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(uname -r), $(swift --version 2>/dev/null | head -1), $(rsync --version | head -1)"
