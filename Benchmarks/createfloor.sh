#!/usr/bin/env bash
# The receiving end's floor (issue 52): what the kernel takes to create tree a's 10,000 files
# when each must be whole or absent at its name (sluice's rule), against `tar xf`'s way (created
# at its name, half-written meanwhile). Benchmarks/createfloor.c (built here with `cc -O2`) makes
# the files the ways it names, in alternating rounds (the order turns each round), each into a
# directory never used before under BASE, a `sync` before each; prints every run and the medians
# of the system time per file (µs) and of the seconds, with each way against tar's.
#
#   BASE=/mnt/fresh-ext4 Benchmarks/createfloor.sh       # ROUNDS=7, FILES=10000
#   MODES="tar sluice" ROUNDS=15 BASE=… Benchmarks/createfloor.sh
#
# BASE should be a freshly made ext4 (see trees.sh: on a file system with a long history,
# creating files slows as its groups fill). The runs' directories are removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
FILES=${FILES:-10000}
MODES=(${MODES:-tar proc sluice rename})
BASE=${BASE:?BASE=DIR: where to create the files (a fresh ext4)}
T=$(mktemp -d)
RUNS=$BASE/createfloor-$$
trap 'rm -rf "$T" "$RUNS"' EXIT
cc -O2 -Wall -o "$T/createfloor" Benchmarks/createfloor.c
mkdir -p "$RUNS"
for round in $(seq "$ROUNDS"); do
    n=${#MODES[@]}
    line="round $round:"
    for i in $(seq 0 $((n - 1))); do
        mode=${MODES[$(((i + round) % n))]}
        sync
        "$T/createfloor" "$mode" "$RUNS/$mode-$round" "$FILES" >>"$T/runs"
        line+=" $(tail -1 "$T/runs" | awk '{printf "%s %.3fs %.1fµs", $1, $3, $4}')"
    done
    echo "$line"
done
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
tar_sys=$(awk '$1 == "tar" {print $4}' "$T/runs" | median)
tar_wall=$(awk '$1 == "tar" {print $3}' "$T/runs" | median)
echo
echo "| way | system µs per file, median (range) | / tar | seconds, median | / tar |"
echo "|---|---|---|---|---|"
for mode in "${MODES[@]}"; do
    sys=$(awk -v m="$mode" '$1 == m {print $4}' "$T/runs" | median)
    wall=$(awk -v m="$mode" '$1 == m {print $3}' "$T/runs" | median)
    range=$(awk -v m="$mode" '$1 == m {print $4}' "$T/runs" | sort -g | sed -n '1p;$p' | paste -sd '–')
    awk -v m="$mode" -v s="$sys" -v r="$range" -v w="$wall" -v ts="$tar_sys" -v tw="$tar_wall" \
        'BEGIN {printf "| %s | %.2f (%s) | %.2f | %.4f | %.2f |\n", m, s, r, s / ts, w, w / tw}'
done
echo
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
    "kernel $(uname -r), $(findmnt -no FSTYPE,OPTIONS -T "$BASE" | cut -c1-60)"
