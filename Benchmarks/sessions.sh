#!/usr/bin/env bash
# Many sessions against one (issue 11), for one build or two alternated: each round runs one
# 1 GiB `send` → `receive --once`, then 16 senders of 64 MiB at once into one receiver, for
# each build in turn. Every process is timed on its own (`/usr/bin/time`), so the table says
# where the CPU went: the receiver's user and system time and minor faults, and the senders'
# CPU summed. The ratio is one / 16 per round (the aggregate rate of 16 against one's), median
# and range over the rounds, bad ones included.
#
#   Benchmarks/sessions.sh                          # this tree's release build, 5 rounds
#   Benchmarks/sessions.sh OLD_SLUICE NEW_SLUICE    # two binaries, alternated
#   ROUNDS=8 RECEIVE_OPTS=--direct Benchmarks/sessions.sh ...
#
# Prints a Markdown table on stdout and every run on stderr. Data as transfer.sh makes it
# (SLUICE_BENCH_DATA, default /tmp/sluice-bench-data).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
if [ $# -eq 0 ]; then
    swift build -c release >/dev/null
    set -- "$PWD/.build/release/sluice"
fi
for build in "$@"; do [ -x "$build" ] || { echo "sessions.sh: $build: not an executable" >&2; exit 66; }; done
SRC=$DATA/random-1024M.bin
SMALL=$DATA/small
mkdir -p "$SMALL"
[ -s "$SRC" ] || head -c $((1024 << 20)) /dev/urandom >"$SRC"
for i in $(seq 1 16); do
    [ -s "$SMALL/f$i" ] || head -c $((64 << 20)) /dev/urandom >"$SMALL/f$i"
done
cat "$SRC" "$SMALL"/* >/dev/null
RECV=$DATA/sessions-recv
read -r -a RECEIVE_EXTRA <<<"${RECEIVE_OPTS:-}"
TIMES=$(mktemp -d)
trap 'rm -rf "$TIMES" "$RECV"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 500); do
        ss -ltn "sport = :$1" | grep -q LISTEN && return 0
        sleep 0.01
    done
    echo "sessions.sh: nothing listens on port $1" >&2
    exit 70
}
now() { date +%s.%N; }
# The last line of a /usr/bin/time file (the line before says "exited with status" after a signal).
times_of() { tail -1 "$1"; }

# one BUILD: "wall receiver-user receiver-system receiver-faults senders-cpu"
one() {
    local build=$1 port pid t0 t1
    rm -rf "$RECV"
    mkdir -p "$RECV"
    sync
    port=$(free_port)
    /usr/bin/time -f '%U %S %R' -o "$TIMES/recv" "$build" receive -q --insecure "${RECEIVE_EXTRA[@]}" \
        --listen "127.0.0.1:$port" --dir "$RECV" --once 2>/dev/null &
    pid=$!
    wait_port "$port"
    t0=$(now)
    /usr/bin/time -f '%U %S' -o "$TIMES/send" "$build" send -q --insecure "$SRC" "127.0.0.1:$port" 2>/dev/null
    wait "$pid"
    t1=$(now)
    echo "$(echo "$t1 - $t0" | bc -l) $(times_of "$TIMES/recv") $(awk '{print $1 + $2}' "$TIMES/send")"
}

# sixteen BUILD: the same fields for 16 senders at once
sixteen() {
    local build=$1 port pid t0 t1 senders=()
    rm -rf "$RECV"
    mkdir -p "$RECV"
    sync
    port=$(free_port)
    /usr/bin/time -f '%U %S %R' -o "$TIMES/recv" "$build" receive -q --insecure "${RECEIVE_EXTRA[@]}" \
        --listen "127.0.0.1:$port" --dir "$RECV" 2>/dev/null &
    pid=$!
    wait_port "$port"
    t0=$(now)
    for i in $(seq 1 16); do
        /usr/bin/time -f '%U %S' -o "$TIMES/send$i" "$build" send -q --insecure "$SMALL/f$i" \
            "127.0.0.1:$port" 2>/dev/null &
        senders+=($!)
    done
    wait "${senders[@]}"
    t1=$(now)
    # /usr/bin/time ignores SIGINT while it waits: the receiver under it gets the signal.
    pkill -INT -P "$pid"
    wait "$pid" 2>/dev/null || true
    echo "$(echo "$t1 - $t0" | bc -l) $(times_of "$TIMES/recv") $(cat "$TIMES"/send[0-9]* | awk '{s += $1 + $2} END {print s}')"
}

# "median min max" of the numbers given
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.2f (%.2f–%.2f)", m, v[1], v[NR]}'; }

declare -A runs
for r in $(seq "$ROUNDS"); do
    for b in $(seq $#); do
        build=${!b}
        o=$(one "$build")
        s=$(sixteen "$build")
        echo "round $r, $build: one $o; 16 $s" >&2
        runs[$b]+="$o|$s;"
    done
done

echo "| build | one 1 GiB, wall s | 16 × 64 MiB, wall s | receiver system s (one / 16) | receiver minor faults (one / 16) | senders' CPU s (one / 16) | one / 16 |"
echo "|---|---|---|---|---|---|---|"
for b in $(seq $#); do
    build=${!b}
    ow=() sw=() osys=() ssys=() ofl=() sfl=() ocpu=() scpu=() ratio=()
    IFS=';' read -r -a rounds <<<"${runs[$b]%;}"
    for pair in "${rounds[@]}"; do
        read -r w _ sy fl cpu <<<"${pair%%|*}"
        read -r w16 _ sy16 fl16 cpu16 <<<"${pair##*|}"
        ow+=("$w") sw+=("$w16") osys+=("$sy") ssys+=("$sy16") ofl+=("$fl") sfl+=("$fl16") ocpu+=("$cpu") scpu+=("$cpu16")
        ratio+=("$(echo "$w / $w16" | bc -l)")
    done
    echo "| \`$build\` | $(stats "${ow[@]}") | $(stats "${sw[@]}") | $(stats "${osys[@]}") / $(stats "${ssys[@]}") | $(stats "${ofl[@]}" | awk '{printf "%d", $1}') / $(stats "${sfl[@]}" | awk '{printf "%d", $1}') | $(stats "${ocpu[@]}") / $(stats "${scpu[@]}") | $(stats "${ratio[@]}") |"
done
echo
echo "$ROUNDS rounds, builds alternated; receive options: ${RECEIVE_OPTS:-none}; $(nproc) cores; load before the end: $(cut -d' ' -f1-3 /proc/loadavg)."
