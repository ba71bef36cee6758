#!/usr/bin/env bash
# Issue 53: one copy split across four tasks against one task, each connection capped at
# RATE (default 20M bytes/s, `send --rate-limit`: a WAN link's share per connection). The tree
# holds one dominant file (DOMINANT_MB) and SMALL files of 1 MiB, so a split by file count
# would leave one task with nearly all the bytes; `--shard-by bytes` gives each task ranges of
# the dominant file under one group. The four tasks run as a job array's would, each with its
# own SLURM_ARRAY_TASK_ID; one task is a plain `send`. Rounds alternate; each time runs from
# the first sender's start to the last one's end, into a fresh directory of one `receive --sync`.
#
#   Benchmarks/shards.sh                       # 400 MiB + 100 x 1 MiB, 20M, 2 rounds
#   DOMINANT_MB=100 SMALL=20 ROUNDS=1 Benchmarks/shards.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DOMINANT_MB=${DOMINANT_MB:-400}
SMALL=${SMALL:-100}
RATE=${RATE:-20M}
ROUNDS=${ROUNDS:-2}
OUT=${DST_DIR:-/dev/shm}/sluice-shards-bench
swift build -c release --product sluice >/dev/null
SLUICE=$PWD/.build/release/sluice
rm -rf "$OUT" && mkdir -p "$OUT/src/tree/small" "$OUT/in"
head -c "$((DOMINANT_MB << 20))" /dev/urandom >"$OUT/src/tree/dominant.bin"
for i in $(seq "$SMALL"); do head -c $((1 << 20)) /dev/urandom >"$OUT/src/tree/small/f$i"; done
KEY=$OUT/key
"$SLUICE" keygen "$KEY" >/dev/null 2>&1
"$SLUICE" receive --key-file "$KEY" --sync --no-fsync --listen 127.0.0.1:0 -C "$OUT/in" 2>"$OUT/recv.log" &
RECEIVER=$!
trap 'kill $RECEIVER 2>/dev/null || true; rm -rf "$OUT"' EXIT
PORT=
for _ in $(seq 500); do
    PORT=$(grep -o '127.0.0.1:[0-9][0-9]*' "$OUT/recv.log" | head -1 | cut -d: -f2 || true)
    [ -n "$PORT" ] && break
    sleep 0.01
done

one() {
    rm -rf "$OUT/in"/*
    local t0; t0=$(date +%s.%N)
    "$SLUICE" send --key-file "$KEY" --rate-limit "$RATE" -q "$OUT/src/tree" "127.0.0.1:$PORT"
    local t1; t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}'
}

four() {
    rm -rf "$OUT/in"/*
    local job=$RANDOM$RANDOM pids=()
    local t0; t0=$(date +%s.%N)
    for task in 0 1 2 3; do
        SLURM_ARRAY_JOB_ID=$job SLURM_ARRAY_TASK_ID=$task SLURM_ARRAY_TASK_COUNT=4 \
            "$SLUICE" send --key-file "$KEY" --rate-limit "$RATE" --shard auto --shard-by bytes --sync -q \
            "$OUT/src/tree" "127.0.0.1:$PORT" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    local t1; t1=$(date +%s.%N)
    diff -r "$OUT/src/tree" "$OUT/in/tree" >/dev/null || { echo "shards.sh: the trees differ" >&2; exit 1; }
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}'
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "tree: ${DOMINANT_MB} MiB + ${SMALL} x 1 MiB; each connection at most $RATE bytes/s"
ratios=()
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then a=$(four); b=$(one); else b=$(one); a=$(four); fi
    r=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}')
    ratios+=("$r")
    echo "round $round: four tasks $a s, one task $b s, ratio $r"
done
echo "four tasks / one task: $(printf '%s\n' "${ratios[@]}" | sort -g | tr '\n' ' ')(target <= 0.3)"
