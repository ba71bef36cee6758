#!/usr/bin/env bash
# `sluice copy -f` of a file onto an existing file of the same size against `cat SRC > DST`
# (issue 15: target <= 1.1x cat's time), and `copy -f --fsync` against `cat SRC > DST; sync DST`.
#
#   Benchmarks/replace.sh                         # ROUNDS=5 SIZE_MB=1024
#   OLD=/path/to/older/sluice Benchmarks/replace.sh   # also time another build, for a before/after
#
# Each round runs every command once, the order rotating between rounds, each after a `sync`
# (untimed) so that no run pays for the previous run's writeback; the destination always exists
# and was written by the previous run, as when a file is replaced again and again. The source is
# in the page cache. Every run is kept: the script prints each time, then the median and range of
# the per-round ratio sluice / peer, as Markdown for RESULTS.md.
#
# On a virtual machine whose memory is backed lazily, pages the guest has never touched (or has
# given back) are slow to fill the first time; a warm-up round, not counted, runs first.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-5}
SIZE_MB=${SIZE_MB:-1024}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice
mkdir -p "$DATA"
SRC=$DATA/random-${SIZE_MB}M.bin
[ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
cat "$SRC" >/dev/null
DST=$DATA/replace-dst.bin
cp "$SRC" "$DST"

now() { date +%s.%N; }
run() { # name command...: prints the seconds the command took
    sync
    local start end
    start=$(now)
    "$@"
    end=$(now)
    echo "$end - $start" | bc
}
sluice_f() { "$SLUICE" copy -f "$SRC" "$DST"; }
cat_over() { cat "$SRC" >"$DST"; }
sluice_fsync() { "$SLUICE" copy -f --fsync "$SRC" "$DST"; }
cat_sync() { cat "$SRC" >"$DST" && sync "$DST"; }
old_f() { "$OLD" copy -f "$SRC" "$DST"; }
names=(sluice_f cat_over sluice_fsync cat_sync)
[ -n "${OLD:-}" ] && names+=(old_f)

for name in "${names[@]}"; do run "$name" >/dev/null; done # warm-up, not counted
declare -A times
for round in $(seq "$ROUNDS"); do
    count=${#names[@]}
    for i in $(seq 0 $((count - 1))); do
        name=${names[$(((i + round) % count))]}
        times[$name]+="$(run "$name") "
    done
    cmp -s "$SRC" "$DST" || { echo "round $round: the destination differs from the source" >&2; exit 1; }
done
[ -z "$(find "$DATA" -maxdepth 1 -name '.replace-dst.bin.sluice-*')" ] || { echo "temporary files left" >&2; exit 1; }

stats() { # numbers...: median (min–max)
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2;
        printf "%.3f (%.3f–%.3f)", m, a[1], a[NR]}'
}
ratios() { # a b: per-round ratios a/b
    local -a x=(${times[$1]}) y=(${times[$2]})
    for i in "${!x[@]}"; do echo "${x[$i]} / ${y[$i]}" | bc -l; done
}
cat <<EOF
## Replacing a file (issue 15) — \`Benchmarks/replace.sh\`, $(date -u '+%Y-%m-%d %H:%M') UTC

Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //; s/ [0-9]*-Core.*//')), kernel $(uname -r),
$(swift --version 2>&1 | head -1 | sed 's/ (.*//'), file system $(df -T "$DATA" | awk 'NR==2 {print $2}'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg).
${SIZE_MB} MiB from the page cache onto an existing file of the same size, $ROUNDS rounds (order
rotating, \`sync\` before each run, one warm-up round not counted), every run kept.

| measurement | sluice s | peer | peer s | ratio, median (range) | target |
|---|---|---|---|---|---|
| \`copy -f\` | $(stats ${times[sluice_f]}) | \`cat > existing\` | $(stats ${times[cat_over]}) | $(stats $(ratios sluice_f cat_over)) | ≤ 1.1 |
| \`copy -f --fsync\` | $(stats ${times[sluice_fsync]}) | \`cat > existing; sync existing\` | $(stats ${times[cat_sync]}) | $(stats $(ratios sluice_fsync cat_sync)) | – |
EOF
if [ -n "${OLD:-}" ]; then
    echo "| \`copy -f\`, $OLD | $(stats ${times[old_f]}) | \`cat > existing\` | $(stats ${times[cat_over]}) | $(stats $(ratios old_f cat_over)) | – |"
fi
echo
for name in "${names[@]}"; do echo "- $name: ${times[$name]}"; done
