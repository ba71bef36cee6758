#!/usr/bin/env bash
# sluice's own AES-GCM at two commits, in one process (Benchmarks/gcm-ab.c): OLD is
# Sources/CSluiceEngines/gcm.c at the commit given (default HEAD), NEW the working tree's.
# Each is compiled with clang -O2 and its symbols renamed; 16 KiB records, AES-128, one core,
# the ways alternating in every round. Prints each way's median and best GB/s and NEW/OLD, then
# what the loop is made of on this CPU (Benchmarks/gcm-ports.c: VAESENC and VPCLMULQDQ
# throughput, the bound their sum sets) with the time-stamp counter's rate.
#
#   Benchmarks/gcm-ab.sh               # the working tree against HEAD
#   Benchmarks/gcm-ab.sh 34e1506       # against that commit's gcm.c
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:-HEAD}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
git show "$OLD:Sources/CSluiceEngines/gcm.c" >"$T/old.c"
cp Sources/CSluiceEngines/gcm.c "$T/new.c"
for v in old new; do
    clang -O2 -c -ISources/CSluiceEngines/include -Dsluice_gcm_seal=${v}_seal -Dsluice_gcm_open=${v}_open \
        -Dsluice_gcm_new=${v}_new -Dsluice_gcm_free=${v}_free -Dsluice_gcm_available=${v}_available \
        "$T/$v.c" -o "$T/$v.o"
done
clang -O2 Benchmarks/gcm-ab.c "$T/old.o" "$T/new.o" -o "$T/gcm-ab"
echo "OLD = gcm.c at $(git rev-parse --short "$OLD"), NEW = the working tree's"
"$T/gcm-ab"
clang -O2 Benchmarks/gcm-ports.c -o "$T/gcm-ports"
"$T/gcm-ports" | tee "$T/ports"
tsc=$(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
ticks=$(awk '/bound/ {print $(NF-4)}' "$T/ports")
echo "time-stamp counter ${tsc} MHz (cpu MHz of /proc/cpuinfo): the bound is $(awk -v t="$ticks" -v m="$tsc" 'BEGIN {printf "%.1f", 256 / t * m / 1000}') GB/s"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
