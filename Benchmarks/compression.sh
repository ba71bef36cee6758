#!/usr/bin/env bash
# Compression at link speed (issue 13): sluice against igzip, pigz, zstd and nc in the same
# run, on a tar of real files. Runs of sluice and its peer alternate, ROUNDS of each; the
# median and the range (min–max) of every time are kept, bad runs included. The section
# between the markers in Benchmarks/RESULTS.md is replaced (compare.sh keeps it: see there).
#
#   Benchmarks/compression.sh               # 134 MB corpus, 5 rounds
#   ROUNDS=3 Benchmarks/compression.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-5}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
OUT=${RESULTS:-$ROOT/Benchmarks/RESULTS.md}

for tool in pigz igzip zstd nc bc /usr/bin/time; do
    command -v "$tool" >/dev/null || {
        echo "compression.sh: $tool is missing (apt-get install -y pigz isal zstd netcat-openbsd bc time)" >&2
        exit 1
    }
done

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice

# The corpus: 134 MB of real files — C++ and Linux headers, an ICU data library, LLVM's shared
# library (binary), documentation — as a tar.
mkdir -p "$DATA"
CORPUS=$DATA/compression-corpus.tar
if [ ! -s "$CORPUS" ]; then
    tar cf - /usr/include/c++ /usr/include/linux /usr/lib/x86_64-linux-gnu/libicudata.so.* \
        /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1 /usr/share/doc 2>/dev/null | head -c 134000000 >"$CORPUS" || true
fi
GZ=$DATA/compression-corpus.igzip1.gz
igzip -1 -c "$CORPUS" >"$GZ"
DST=$DATA/compression-dst
cat "$CORPUS" "$GZ" >/dev/null

timed() {
    local t0 t1
    rm -f "$DST" "$DST".*
    sync
    t0=$(date +%s.%N)
    bash -c "$1" >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

# "median min max" of the numbers given
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.3f %.3f %.3f", m, v[1], v[NR]}'; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

rows=()
# measure NAME SLUICE_CMD PEER_NAME PEER_CMD TARGET
measure() {
    local a=() b=() sa sb ratio verdict ratios=()
    for _ in $(seq "$ROUNDS"); do
        local x y
        x=$(timed "$2")
        y=$(timed "$4")
        a+=("$x")
        b+=("$y")
        ratios+=("$(echo "$x / $y" | bc -l)")
    done
    read -r sm smin smax <<<"$(stats "${a[@]}")"
    read -r pm pmin pmax <<<"$(stats "${b[@]}")"
    read -r rm rmin rmax <<<"$(stats "${ratios[@]}")"
    verdict="-"
    if [ "$5" != "-" ]; then
        if (($(echo "$rm <= $5" | bc -l))); then verdict=met; else verdict="NOT met"; fi
    fi
    rows+=("| $1 | $sm s ($smin–$smax) | $3 | $pm s ($pmin–$pmax) | $(printf '%.2f' "$rm") ($(printf '%.2f' "$rmin")–$(printf '%.2f' "$rmax")) | ${5/-/reference} | $verdict |")
    echo "${rows[-1]}"
}

size_of() { bash -c "$1" | wc -c; }

measure "-zgzip:1 ($("$SLUICE" --version | sed -n 's/^engines: //p' | grep -q ISA-L && echo ISA-L || echo zlib))" \
    "$SLUICE copy -f -zgzip:1 $CORPUS $DST" "igzip -1" "igzip -1 -c $CORPUS > $DST" 1.0
measure "-zgzip:1 vs pigz" "$SLUICE copy -f -zgzip:1 $CORPUS $DST" "pigz -p2 -1" "pigz -p2 -1 -c $CORPUS > $DST" 0.5
measure "-zgzip:6 ($("$SLUICE" --version | sed -n 's/^engines: //p' | grep -q libdeflate && echo libdeflate || echo zlib))" \
    "$SLUICE copy -f -zgzip:6 $CORPUS $DST" "pigz -p2 -6" "pigz -p2 -6 -c $CORPUS > $DST" 1.0
measure "-zgzip:6, zlib engine alone" "SLUICE_ENGINES=zlib $SLUICE copy -f -zgzip:6 $CORPUS $DST" "pigz -p2 -6" \
    "pigz -p2 -6 -c $CORPUS > $DST" 1.0
measure "-zzstd:3" "$SLUICE copy -f -zzstd:3 $CORPUS $DST" "zstd -3 -T2" "zstd -q -3 -T2 -c $CORPUS > $DST" 1.0
measure "-d of igzip -1's output" "$SLUICE copy -f -d $GZ $DST" "igzip -d" "igzip -dc $GZ > $DST" 1.0
P1=$(free_port)
P2=$(free_port)
measure "-zgzip:1 → loopback → -d" \
    "$SLUICE copy -d tcp-listen:127.0.0.1:$P1 $DST.x & sleep 0.3; $SLUICE copy -zgzip:1 $CORPUS tcp:127.0.0.1:$P1; wait" \
    "igzip -1 \\| nc -N → nc -l \\| igzip -d" \
    "nc -l 127.0.0.1 $P2 | igzip -dc > $DST.y & sleep 0.3; igzip -1 -c $CORPUS | nc -N 127.0.0.1 $P2; wait" 1.0

sizes="| output | bytes |
|---|---|
| sluice -zgzip:1 | $(size_of "$SLUICE copy -zgzip:1 $CORPUS -") |
| SLUICE_ENGINES=zlib sluice -zgzip:1 | $(size_of "SLUICE_ENGINES=zlib $SLUICE copy -zgzip:1 $CORPUS -") |
| gzip -1 | $(size_of "gzip -1 -c $CORPUS") |
| igzip -1 | $(size_of "igzip -1 -c $CORPUS") |
| pigz -p2 -1 | $(size_of "pigz -p2 -1 -c $CORPUS") |
| sluice -zgzip:6 | $(size_of "$SLUICE copy -zgzip:6 $CORPUS -") |
| SLUICE_ENGINES=zlib sluice -zgzip:6 | $(size_of "SLUICE_ENGINES=zlib $SLUICE copy -zgzip:6 $CORPUS -") |
| pigz -p2 -6 | $(size_of "pigz -p2 -6 -c $CORPUS") |
| sluice -zzstd:3 | $(size_of "$SLUICE copy -zzstd:3 $CORPUS -") |
| zstd -3 | $(size_of "zstd -q -3 -c $CORPUS") |"

rss() { /usr/bin/time -f %M bash -c "$1" 2>&1 >/dev/null | tail -1; }
head -c 16000000 "$CORPUS" >"$DATA/small.tar"
memory="| input | peak RSS of sluice copy -zgzip:6 | of -zzstd:3 |
|---|---|---|
| 16 MB | $(rss "$SLUICE copy -zgzip:6 $DATA/small.tar -") KiB | $(rss "$SLUICE copy -zzstd:3 $DATA/small.tar -") KiB |
| 134 MB | $(rss "$SLUICE copy -zgzip:6 $CORPUS -") KiB | $(rss "$SLUICE copy -zzstd:3 $CORPUS -") KiB |"

section="<!-- compression.sh begin -->
## Compression (issue 13)

Written by \`Benchmarks/compression.sh\` on $(date -u '+%Y-%m-%d %H:%M') UTC: $ROUNDS rounds, sluice and
the peer alternating, each after a \`sync\`; times are median (min–max) over all rounds, bad ones
included; the ratio is sluice's time over the peer's, per round, median (min–max). Corpus:
tar of real files (headers, ICU data, LLVM library, docs), $(stat -c %s "$CORPUS") bytes.
Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); load average
before the run: $LOAD_BEFORE, at its end: $(cut -d' ' -f1-3 /proc/loadavg) (${MACHINE_NOTE:-anything else
running on the machine shows there}).
\`sluice --version\`: $("$SLUICE" --version | tr '\n' ';' | sed 's/;$//').

| measurement | sluice | peer | peer time | ratio | target | verdict |
|---|---|---|---|---|---|---|
$(printf '%s\n' "${rows[@]}")

$sizes

$memory
<!-- compression.sh end -->"

if grep -q '<!-- compression.sh begin -->' "$OUT" 2>/dev/null; then
    python3 - "$OUT" "$section" <<'PY'
import re, sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
text = re.sub(r'<!-- compression.sh begin -->.*?<!-- compression.sh end -->', lambda m: section, text, flags=re.S)
open(path, 'w').write(text)
PY
else
    printf '\n%s\n' "$section" >>"$OUT"
fi
echo "wrote $OUT"
