#!/usr/bin/env bash
# Issue 50's figures on loopback, all in one run:
#  1. 1 GiB `send --relay R --no-direct` (every byte through `sluice relay`) against the same
#     file sent straight to `receive --once` at an address (a key file on both sides), rounds
#     alternating (ABBA); each time runs from the sender's start to the receiver's exit. The
#     relay's CPU (user + system, from /proc) is read around each relayed round.
#  2. From `receive CODE` to its exit with a 1-byte file stored (the code exchange's scrypt,
#     the relay's round trips and TLS included), through the relay (--no-direct) and with the
#     default (direct once met): ROUNDS each, the median and range.
#
#   Benchmarks/reach.sh                 # 1024 MiB, 6 rounds
#   SIZE_MB=256 ROUNDS=2 Benchmarks/reach.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB=${SIZE_MB:-1024}
ROUNDS=${ROUNDS:-6}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
OUT=${DST_DIR:-/dev/shm}/sluice-reach-bench
swift build -c release --product sluice >/dev/null
SLUICE=$PWD/.build/release/sluice
mkdir -p "$DATA"
SRC=$DATA/random-${SIZE_MB}M.bin
[ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
cat "$SRC" >/dev/null
rm -rf "$OUT" && mkdir -p "$OUT/in" "$OUT/tiny"
printf x >"$OUT/tiny/one"
KEY=$OUT/key
"$SLUICE" keygen "$KEY" >/dev/null 2>&1
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$OUT"' EXIT

"$SLUICE" relay --listen 127.0.0.1:0 -q 2>"$OUT/relay.log" &
RELAY_PID=$!
PIDS+=("$RELAY_PID")
RELAY=
for _ in $(seq 500); do
    RELAY=$(grep -o '127.0.0.1:[0-9][0-9]*' "$OUT/relay.log" | head -1 || true)
    [ -n "$RELAY" ] && break
    sleep 0.01
done
[ -n "$RELAY" ] || { echo "reach.sh: the relay printed no address" >&2; exit 1; }
TICKS=$(getconf CLK_TCK)
relay_cpu() { awk -v t="$TICKS" '{printf "%.3f", ($14 + $15) / t}' "/proc/$RELAY_PID/stat"; }

# The code `send` prints on stderr (file $1), waiting for it.
code_of() {
    for _ in $(seq 1000); do
        local c; c=$(grep -o 'code: [0-9a-z-]*' "$1" | head -1 | cut -d' ' -f2 || true)
        [ -n "$c" ] && { echo "$c"; return; }
        sleep 0.005
    done
    echo "reach.sh: no code in $1" >&2
    return 1
}

# The CPU seconds (user + system) /usr/bin/time wrote to file $1.
cpu_of() { awk '/^cpu / {s += $2 + $3} END {printf "%.3f", s}' "$1"; }

run_relayed() {  # $1: file, $2: extra send options; prints seconds; both ends' CPU in $OUT/ends.cpu
    rm -rf "$OUT/in"/*
    local t0; t0=$(date +%s.%N)
    /usr/bin/time -f 'cpu %U %S' -o "$OUT/send.time" "$SLUICE" send --relay "$RELAY" -q $2 "$1" 2>"$OUT/send.log" &
    local s=$!
    local code; code=$(code_of "$OUT/send.log")
    /usr/bin/time -f 'cpu %U %S' -o "$OUT/recv.time" "$SLUICE" receive --relay "$RELAY" --no-fsync -q -C "$OUT/in" "$code"
    wait "$s"
    local t1; t1=$(date +%s.%N)
    cat "$OUT/send.time" "$OUT/recv.time" >"$OUT/both.time"
    cpu_of "$OUT/both.time" >"$OUT/ends.cpu"
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}

run_direct() {  # prints seconds
    rm -rf "$OUT/in"/*
    /usr/bin/time -f 'cpu %U %S' -o "$OUT/recv.time" \
        "$SLUICE" receive --key-file "$KEY" --once --no-fsync --listen 127.0.0.1:0 -C "$OUT/in" 2>"$OUT/recv.log" &
    local r=$!
    local port=
    for _ in $(seq 500); do
        port=$(grep -o '127.0.0.1:[0-9][0-9]*' "$OUT/recv.log" | head -1 | cut -d: -f2 || true)
        [ -n "$port" ] && break
        sleep 0.005
    done
    local t0; t0=$(date +%s.%N)
    /usr/bin/time -f 'cpu %U %S' -o "$OUT/send.time" "$SLUICE" send --key-file "$KEY" -q "$SRC" "127.0.0.1:$port"
    wait "$r"
    local t1; t1=$(date +%s.%N)
    cat "$OUT/send.time" >"$OUT/both.time"
    awk '/^cpu / {print}' "$OUT/recv.time" >>"$OUT/both.time" 2>/dev/null || true
    cpu_of "$OUT/both.time" >"$OUT/ends.cpu"
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
range() { sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {print lo "–" hi}'; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "== $SIZE_MB MiB: through the relay (--no-direct) vs straight to an address"
# Each round also gives the CPU seconds of all the processes of each way: on two cores, a way
# whose processes together use about 2 × its seconds is bound by the CPU, not by the relay.
relayed=() direct=() cpu=()
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order="relay direct"; else order="direct relay"; fi
    for which in $order; do
        if [ "$which" = relay ]; then
            c0=$(relay_cpu)
            t=$(run_relayed "$SRC" --no-direct)
            c1=$(relay_cpu)
            relayed+=("$t")
            relay_used=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.3f", b - a}')
            cpu+=("$(awk -v u="$relay_used" -v s="$SIZE_MB" 'BEGIN {printf "%.3f", u * 1024 / s}')")
            relay_all=$(awk -v e="$(cat "$OUT/ends.cpu")" -v u="$relay_used" 'BEGIN {printf "%.2f", e + u}')
        else
            direct+=("$(run_direct)")
            direct_all=$(cat "$OUT/ends.cpu")
        fi
    done
    echo "round $round: relay ${relayed[-1]} s (relay CPU ${cpu[-1]} s/GiB; all three processes $relay_all CPU s)," \
        "direct ${direct[-1]} s (both ends $direct_all CPU s)"
done
ratios=()
for i in "${!relayed[@]}"; do ratios+=("$(awk -v r="${relayed[$i]}" -v d="${direct[$i]}" 'BEGIN {printf "%.3f", d / r}')"); done
echo "relayed rate / direct rate: median $(printf '%s\n' "${ratios[@]}" | median) (range $(printf '%s\n' "${ratios[@]}" | range)); target >= 0.9"
echo "relay CPU per GiB: median $(printf '%s\n' "${cpu[@]}" | median) s (range $(printf '%s\n' "${cpu[@]}" | range)); target <= 0.25"

echo "== receive CODE to a 1-byte file stored (scrypt, round trips and TLS included)"
for mode in --no-direct ""; do
    times=()
    for _ in $(seq "$ROUNDS"); do
        rm -rf "$OUT/in"/*
        "$SLUICE" send --relay "$RELAY" -q $mode "$OUT/tiny/one" 2>"$OUT/send.log" &
        s=$!
        code=$(code_of "$OUT/send.log")
        t0=$(date +%s.%N)
        "$SLUICE" receive --relay "$RELAY" --no-fsync -q -C "$OUT/in" "$code"
        t1=$(date +%s.%N)
        wait "$s"
        times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) * 1000}')")
    done
    echo "${mode:-direct}: median $(printf '%s\n' "${times[@]}" | median) ms (range $(printf '%s\n' "${times[@]}" | range) ms)"
done
# The floor: a process that does nothing.
times=()
for _ in $(seq "$ROUNDS"); do
    t0=$(date +%s.%N); "$SLUICE" --version >/dev/null; t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) * 1000}')")
done
echo "sluice --version alone: median $(printf '%s\n' "${times[@]}" | median) ms"
