#!/usr/bin/env bash
# What authentication costs (issue 52): 1 GiB `sluice send --key-file` → `sluice receive
# --key-file --once` (TLS 1.3 with the key's PSK) against the same with `--insecure` and against
# `nc -N` → `nc -l`, on loopback, in alternating rounds (the order rotates each round), each
# into /dev/shm (`--no-fsync`: the figure is the transport's, not the disk's). Prints each run's
# wall time (sender's start to both ends' exit) and user/system CPU of each end, then the
# medians and ranges of authenticated/insecure and authenticated/nc, and each kind's CPU seconds
# (both ends, and each end), which move less than the walls on a VM whose page faults vary.
#
#   Benchmarks/tlscost.sh                      # ROUNDS=5, .build/release/sluice
#   SLUICE=/path/to/sluice ROUNDS=7 Benchmarks/tlscost.sh
#   SLUICE_OLD=/path/to/old/sluice Benchmarks/tlscost.sh   # also that build's auth and insecure
#                                                           # runs, in the same rounds (A/B)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
ROUNDS=${ROUNDS:-5}
SIZE_MB=${SIZE_MB:-1024}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
[ -n "${SLUICE:-}" ] || { swift build -c release --product sluice >/dev/null && SLUICE=$PWD/.build/release/sluice; }
SRC=$DATA/random-${SIZE_MB}M.bin
mkdir -p "$DATA" && { [ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"; } && cat "$SRC" >/dev/null
KEY=$DATA/tlscost.key
[ -f "$KEY" ] || "$SLUICE" keygen "$KEY" >/dev/null
OUT=/dev/shm/sluice-tlscost
T=$(mktemp -d)
trap 'rm -rf "$OUT" "$T"' EXIT

# One run of kind $1 (auth, insecure, nc); prints "wall rU rS sU sS".
run() {
    rm -rf "$OUT"
    mkdir -p "$OUT"
    local port t0 t1 pid
    port=$(free_port)
    case $1 in
    auth | insecure | auth-old | insecure-old)
        local opts=(--insecure) bin=$SLUICE
        [ "${1%-old}" = auth ] && opts=(--key-file "$KEY")
        [ "${1%-old}" != "$1" ] && bin=$SLUICE_OLD
        /usr/bin/time -f '%U %S' -o "$T/r" "$bin" receive -q "${opts[@]}" --no-fsync --once \
            --listen "127.0.0.1:$port" --dir "$OUT" 2>/dev/null &
        pid=$!
        wait_port "$port"
        t0=$(now)
        /usr/bin/time -f '%U %S' -o "$T/s" "$bin" send -q "${opts[@]}" "$SRC" "127.0.0.1:$port" 2>/dev/null
        wait "$pid"
        t1=$(now)
        cmp -s "$SRC" "$OUT/$(basename "$SRC")" || { echo "$1: output differs" >&2; exit 1; }
        ;;
    nc)
        /usr/bin/time -f '%U %S' -o "$T/r" nc -l 127.0.0.1 "$port" >"$OUT/f" &
        pid=$!
        wait_port "$port"
        t0=$(now)
        /usr/bin/time -f '%U %S' -o "$T/s" nc -N 127.0.0.1 "$port" <"$SRC"
        wait "$pid"
        t1=$(now)
        ;;
    esac
    echo "$(elapsed "$t0" "$t1") $(cat "$T/r") $(cat "$T/s")"
}

kinds=(auth insecure nc)
[ -n "${SLUICE_OLD:-}" ] && kinds+=(auth-old insecure-old)
declare -A wall cpu sender receiver
for r in $(seq "$ROUNDS"); do
    for i in "${!kinds[@]}"; do
        k=${kinds[$(((i + r) % ${#kinds[@]}))]}
        line=$(run "$k")
        wall[$k]+="${line%% *} "
        # CPU seconds of each end and of both (the totals are exact; their split into user
        # and system is the kernel's sampling, by the tick on some kernels).
        read -r _ ru rs su ss <<<"$line"
        receiver[$k]+="$(awk -v u="$ru" -v s="$rs" 'BEGIN {printf "%.2f", u + s}') "
        sender[$k]+="$(awk -v u="$su" -v s="$ss" 'BEGIN {printf "%.2f", u + s}') "
        cpu[$k]+="$(awk -v a="$ru" -v b="$rs" -v c="$su" -v d="$ss" 'BEGIN {printf "%.2f", a + b + c + d}') "
        echo "round $r $k: wall ${line%% *} s, receiver user/sys $(echo "$line" | cut -d' ' -f2-3), sender user/sys $(echo "$line" | cut -d' ' -f4-5)"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# Ratios of the runs of one round to each other, median and range.
ratio() {
    local a=(${wall[$1]}) b=(${wall[$2]}) i
    for i in "${!a[@]}"; do awk -v x="${a[$i]}" -v y="${b[$i]}" 'BEGIN {printf "%.3f\n", x / y}'; done |
        sort -g | awk '{a[NR]=$1} END {printf "median %.3f, range %.3f-%.3f", (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2, a[1], a[NR]}'
}
for k in "${kinds[@]}"; do echo "$k wall: ${wall[$k]}(median $(echo "${wall[$k]}" | median))"; done
for k in "${kinds[@]}"; do
    echo "$k CPU s, both ends: ${cpu[$k]}(median $(echo "${cpu[$k]}" | median)); receiver median" \
        "$(echo "${receiver[$k]}" | median), sender median $(echo "${sender[$k]}" | median)"
done
echo "auth/insecure: $(ratio auth insecure) (target <= 1.15)"
echo "auth/nc: $(ratio auth nc) (target <= 1.0)"
if [ -n "${SLUICE_OLD:-}" ]; then
    echo "old auth/insecure: $(ratio auth-old insecure-old)"
    echo "old auth/nc: $(ratio auth-old nc)"
    echo "auth/old auth: $(ratio auth auth-old)"
    echo "insecure/old insecure: $(ratio insecure insecure-old)"
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
