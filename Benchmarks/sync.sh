#!/usr/bin/env bash
# A second run: `sluice send --sync` against `rsync -a` to an rsync daemon, on loopback, with
# the 10,000-file tree of Benchmarks/trees.sh (tree a: 1–64 KiB files in 1,000 directories,
# made there once and cached in $SLUICE_BENCH_DATA/trees).
#
#   unchanged  each tool copied the tree once (not timed); then each round times a second run
#              of each, alternating: nothing to send.
#   changed    a second source: 1% of the files rewritten (new bytes, new mtime) and 1% removed.
#              Each round, each tool's copy of the original (made with `cp -a`, not timed) is
#              brought up to the second source: `sluice send --sync --delete` against
#              `rsync -a --delete`; the result is compared with `diff -r` after the clock.
#
# Timed: the sender's (or rsync client's) whole run; the receiver and the daemon run
# throughout. Printed: per-round seconds and the ratio sluice / rsync, median and range.
#
# With OLD=path of another sluice build, that build runs too, into a receiver of its own, right
# after this one in each round (an A/B of two builds: its ratio to this build is printed).
# Each run's user and system CPU time (the sending end's) is printed beside its seconds.
#
#   Benchmarks/sync.sh                 # ROUNDS=5
#   ROUNDS=1 FILES=500 Benchmarks/sync.sh
#   OLD=/tmp/old/.build/release/sluice Benchmarks/sync.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-5}
FILES=${FILES:-10000}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}

need() { command -v "$1" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need rsync rsync
[ -x "$ROOT/.build/release/sluice" ] || swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice
OTHER=${OLD:-}
[ -z "$OTHER" ] || [ -x "$OTHER" ] || { echo "sync.sh: OLD=$OTHER is not an executable" >&2 && exit 64; }

# The tree: trees.sh makes and caches it.
TREE=$DATA/trees/a-$FILES
if [ ! -s "$TREE.complete" ]; then
    ROUNDS=1 FILES=$FILES TREES=a ONLY=tar "$ROOT/Benchmarks/trees.sh" >/dev/null
fi
RUNS=$(mktemp -d "$DATA/sync-runs.XXXX")
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$RUNS"
}
trap cleanup EXIT

# shellcheck source=Benchmarks/common.sh
. "$ROOT/Benchmarks/common.sh"

# One receiver and one daemon for the whole run, each serving $RUNS/in. The receiver lets the
# sender remove entries (the changed scenario's --delete).
RECEIVE_DELETE=1
mkdir -p "$RUNS/sluice" "$RUNS/rsync" "$RUNS/old"
start_sluice_receiver "$RUNS/sluice" "$RUNS/receive.log"
PORT_NEW=$SPORT
if [ -n "$OTHER" ]; then
    SLUICE=$OTHER start_sluice_receiver "$RUNS/old" "$RUNS/receive-old.log"
    PORT_OLD=$SPORT
fi
start_rsync_daemon "$RUNS/rsync" "$RUNS"
cc -O2 -o "$RUNS/rusage" "$ROOT/Benchmarks/rusage.c"

# $1: source directory (stored under its base name), $2: rsync's subdirectory for the scenario
# (sluice's receiver stores at its directory/NAME), $3…: extra flags. Prints seconds.
# BIN=old runs the OLD build into its own receiver. The CPU time of the run (user and system,
# seconds) goes to $RUNS/cpu.
run_sluice() {
    local src=$1 t0 t1 bin=$SLUICE port=$PORT_NEW
    shift 2
    [ "${BIN:-}" = old ] && bin=$OTHER port=$PORT_OLD
    t0=$(now)
    "$RUNS/rusage" "$RUNS/cpu.us" "$bin" send --insecure -q --sync "$@" "$src" "127.0.0.1:$port" ||
        { echo "sluice send failed" >&2; exit 1; }
    t1=$(now)
    awk '{printf "%.3f %.3f", $1 / 1e6, $2 / 1e6}' "$RUNS/cpu.us" >"$RUNS/cpu"
    elapsed "$t0" "$t1"
}
# The OLD build's run after this one's, when there is one: its seconds and CPU into OLDLINE,
# its ratio to this build's seconds ($1) appended to the array named $2.
run_old() {
    [ -n "$OTHER" ] || return 0
    local s=$1 o
    local -n list=$2
    shift 2
    o=$(BIN=old run_sluice "$@")
    list+=("$(awk -v a="$s" -v b="$o" 'BEGIN {printf "%.3f", a / b}')")
    OLDLINE="; old ${o}s (user, system $(cat "$RUNS/cpu")), this build / old ${list[-1]}"
}
run_rsync() {
    local src=$1 dest=$2 t0 t1
    shift 2
    t0=$(now)
    rsync -a "$@" "$src" "rsync://127.0.0.1:$RPORT/m/$dest/"
    t1=$(now)
    elapsed "$t0" "$t1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
summarize() { # label ratios...
    local label=$1
    shift
    printf '%s\n' "$@" | sort -n | awk -v label="$label" '{r[NR]=$1} END {
        m = (NR % 2) ? r[(NR+1)/2] : (r[NR/2] + r[NR/2+1]) / 2
        printf "%s: median %.2f (range %.2f–%.2f) over %d rounds\n", label, m, r[1], r[NR], NR }'
}

# --- unchanged: copy once, then time second runs.
name=$(basename "$TREE")
mkdir -p "$RUNS/rsync/u"
run_sluice "$TREE" u >/dev/null
[ -z "$OTHER" ] || BIN=old run_sluice "$TREE" u >/dev/null
run_rsync "$TREE" u >/dev/null
unchanged=()
olds_unchanged=()
for round in $(seq "$ROUNDS"); do
    sync
    OLDLINE=
    if [ $((round % 2)) = 1 ]; then
        s=$(run_sluice "$TREE" u)
        cpu=$(cat "$RUNS/cpu")
        run_old "$s" olds_unchanged "$TREE" u
        r=$(run_rsync "$TREE" u)
    else
        r=$(run_rsync "$TREE" u)
        s=$(run_sluice "$TREE" u)
        cpu=$(cat "$RUNS/cpu")
        run_old "$s" olds_unchanged "$TREE" u
    fi
    unchanged+=("$(ratio "$s" "$r")")
    echo "round $round, unchanged: sluice --sync ${s}s (user, system $cpu), rsync -a ${r}s$OLDLINE"
done
diff -r "$TREE" "$RUNS/sluice/$name" >/dev/null
diff -r "$TREE" "$RUNS/rsync/u/$name" >/dev/null
[ -z "$OTHER" ] || diff -r "$TREE" "$RUNS/old/$name" >/dev/null
# The same with contents compared by digest: every file read at both ends.
checksum=()
for round in $(seq "$ROUNDS"); do
    sync
    if [ $((round % 2)) = 1 ]; then
        s=$(run_sluice "$TREE" u --checksum)
        r=$(run_rsync "$TREE" u -c)
    else
        r=$(run_rsync "$TREE" u -c)
        s=$(run_sluice "$TREE" u --checksum)
    fi
    checksum+=("$(ratio "$s" "$r")")
    echo "round $round, unchanged, by digest: sluice --sync --checksum ${s}s, rsync -a -c ${r}s"
done

# --- changed: 1% rewritten, 1% removed, into fresh copies of the first copy each round.
SRC2=$RUNS/src2/$name
mkdir -p "$RUNS/src2"
cp -a "$TREE" "$SRC2"
mapfile -t files < <(cd "$SRC2" && find . -type f | sort)
count=${#files[@]}
step=$((count / (count / 100)))
for ((i = 0; i < count; i += step)); do
    head -c "$((1024 + i % 4096))" /dev/urandom >"$SRC2/${files[i]}"
    [ $((i + 1)) -lt "$count" ] && rm -f "$SRC2/${files[i + 1]}"
done
changed=()
for round in $(seq "$ROUNDS"); do
    # Fresh copies of the synced tree for each tool (not timed).
    rm -rf "${RUNS:?}/sluice/$name" "$RUNS/rsync/c"
    cp -a "$TREE" "$RUNS/sluice/$name"
    mkdir -p "$RUNS/rsync/c"
    cp -a "$TREE" "$RUNS/rsync/c/$name"
    sync
    if [ $((round % 2)) = 1 ]; then
        s=$(run_sluice "$SRC2" c --delete)
        r=$(run_rsync "$SRC2" c --delete)
    else
        r=$(run_rsync "$SRC2" c --delete)
        s=$(run_sluice "$SRC2" c --delete)
    fi
    diff -r "$SRC2" "$RUNS/sluice/$name" >/dev/null
    diff -r "$SRC2" "$RUNS/rsync/c/$name" >/dev/null
    changed+=("$(ratio "$s" "$r")")
    echo "round $round, 1% changed and 1% removed: sluice --sync --delete ${s}s, rsync -a --delete ${r}s"
done

summarize "second run, unchanged ($count files): sluice --sync / rsync -a" "${unchanged[@]}"
[ -z "$OTHER" ] || summarize "second run, unchanged: this build / OLD" "${olds_unchanged[@]}"
summarize "second run, unchanged, by digest: sluice --sync --checksum / rsync -a -c" "${checksum[@]}"
summarize "second run, 1% changed + 1% removed: sluice --sync --delete / rsync -a --delete" "${changed[@]}"
echo "machine: $(nproc) cores, $(uname -r), $(swift --version 2>/dev/null | head -1), $(rsync --version | head -1)"
