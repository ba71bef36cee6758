#!/usr/bin/env bash
# Zero-copy paths (issue 15), each against its references in the same run:
#
#   1. SIZE_MB (1 GiB) file → `sluice copy FILE tcp:127.0.0.1:P` → `sluice copy
#      tcp-listen:127.0.0.1:P OUT` (sendfile, then splice through a pipe), against
#      `nc -N` → `nc -l > OUT`, against the same with `--no-zero-copy`, against the
#      binary of BASE_REV (default f516f43, main before zero-copy: "today's"), and with the
#      receiver writing with `copy --direct` (O_DIRECT, past the page cache);
#   2. the same file → file: `sluice copy` (copy_file_range) against `cat`, `--no-zero-copy`
#      and BASE_REV.
#
# Wall time from the sender's start to both ends' exit; CPU seconds (user + system) of both
# ends from /usr/bin/time. ROUNDS rounds (default 5), each running every contender once in an
# order that changes from round to round, after a `sync` and with the output removed; one
# warm-up round first that is not counted (this machine is a VM whose never-touched memory is
# slow on first use, so the first run after boot can be much slower), and whose outputs are
# compared with the source byte for byte. Every round is kept and printed; the table gives the
# median and range of the per-round ratios.
#
#   Benchmarks/zerocopy.sh
#   ROUNDS=7 SIZE_MB=512 Benchmarks/zerocopy.sh
#   BASELINE=/path/to/sluice-f516f43 Benchmarks/zerocopy.sh   # skip building BASE_REV
#   BASE_REV=d6f442b BASE_NOTE="main when issue 15 was filed" Benchmarks/zerocopy.sh
#
# BASE_REV is built once (git archive into $SLUICE_BENCH_DATA/sluice-BASE_REV, swift build -c
# release) and kept there. Prints a Markdown section on stdout for RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-5}
SIZE_MB=${SIZE_MB:-1024}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
BASE_REV=${BASE_REV:-f516f43}
# What BASE_REV was, for the report.
BASE_NOTE=${BASE_NOTE:-main before the zero-copy work}
command -v nc >/dev/null || { apt-get update -qq && apt-get install -y -qq netcat-openbsd >/dev/null; }
[ -x /usr/bin/time ] || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
swift build -c release --product sluice >/dev/null
SLUICE=$ROOT/.build/release/sluice
mkdir -p "$DATA"
BASE=${BASELINE:-$DATA/sluice-$BASE_REV/sluice}
if [ ! -x "$BASE" ]; then
    echo "building $BASE_REV once into $DATA/sluice-$BASE_REV ..." >&2
    rm -rf "$DATA/sluice-$BASE_REV"
    mkdir -p "$DATA/sluice-$BASE_REV/src"
    git archive "$BASE_REV" | tar -x -C "$DATA/sluice-$BASE_REV/src"
    (cd "$DATA/sluice-$BASE_REV/src" && swift build -c release --product sluice >/dev/null)
    cp "$DATA/sluice-$BASE_REV/src/.build/release/sluice" "$BASE"
fi
SRC=$DATA/random-${SIZE_MB}M.bin
[ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
WORK=$(mktemp -d "$DATA/zerocopy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out
cat "$SRC" >/dev/null

now() { date +%s.%N; }
# The CPU seconds (user + system) in the /usr/bin/time outputs named, summed.
cpu_of() { cat "$@" | awk '{s += $1 + $2} END {printf "%.3f", s}'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
# Waits (bounded) until something listens on 127.0.0.1:$1.
wait_port() {
    for _ in $(seq 500); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.01
    done
    echo "nothing listens on $1" >&2
    return 1
}
check_size() {
    local got
    got=$(stat -c %s "$OUT" 2>/dev/null || echo 0)
    [ "$got" = "$((SIZE_MB << 20))" ] || { echo "$1: wrote $got bytes" >&2; exit 1; }
}

# Each prints "WALL CPU". $1 is the contender: zc (sluice), rw (sluice --no-zero-copy),
# base (BASE_REV), nc or cat. For the sluices, CMD is the command up to its operands.
command_of() {
    case $1 in
    zc) CMD=("$SLUICE" copy -q) ;;
    rw) CMD=("$SLUICE" copy -q --no-zero-copy) ;;
    base) CMD=("$BASE" copy -q) ;;
    dz) CMD=("$SLUICE" copy -q --direct) ;;
    esac
}
# The output of the run before is written back (sync) and only then removed, just before the
# run: freed pages are reused at once rather than handed back to the hypervisor first (free
# page reporting), which would make the next run pay for fresh memory.
loopback() {
    sync
    rm -f "$OUT" "$WORK"/*.cpu
    local port pid t0 t1 dest=${2:-$OUT}
    port=$(free_port)
    if [ "$1" = nc ]; then
        /usr/bin/time -f '%U %S' -o "$WORK/r.cpu" nc -l 127.0.0.1 "$port" >"$OUT" &
    else
        command_of "$1"
        /usr/bin/time -f '%U %S' -o "$WORK/r.cpu" "${CMD[@]}" "tcp-listen:127.0.0.1:$port" "$dest" &
    fi
    pid=$!
    wait_port "$port"
    t0=$(now)
    if [ "$1" = nc ]; then
        /usr/bin/time -f '%U %S' -o "$WORK/s.cpu" nc -N 127.0.0.1 "$port" <"$SRC"
    else
        # --direct is the receiver's alone: its sender is the zero-copy one.
        command_of "${1/dz/zc}"
        /usr/bin/time -f '%U %S' -o "$WORK/s.cpu" "${CMD[@]}" "$SRC" "tcp:127.0.0.1:$port"
    fi
    wait "$pid"
    t1=$(now)
    [ "$dest" = /dev/null ] || check_size "loopback $1"
    echo "$(echo "$t1 - $t0" | bc -l) $(cpu_of "$WORK/r.cpu" "$WORK/s.cpu")"
}
filecopy() {
    sync
    rm -f "$OUT" "$WORK"/*.cpu
    local t0 t1
    t0=$(now)
    if [ "$1" = cat ]; then
        /usr/bin/time -f '%U %S' -o "$WORK/f.cpu" cat "$SRC" >"$OUT"
    else
        command_of "$1"
        /usr/bin/time -f '%U %S' -o "$WORK/f.cpu" "${CMD[@]}" "$SRC" "$OUT"
    fi
    t1=$(now)
    check_size "file $1"
    echo "$(echo "$t1 - $t0" | bc -l) $(cpu_of "$WORK/f.cpu")"
}

# The paths the zero-copy build takes, from its own report (and a byte-for-byte check): the
# warm-up round.
port=$(free_port)
"$SLUICE" copy -q --stats=json "tcp-listen:127.0.0.1:$port" "$OUT" 2>"$WORK/recv.json" &
pid=$!
wait_port "$port"
"$SLUICE" copy -q --stats=json "$SRC" "tcp:127.0.0.1:$port" 2>"$WORK/send.json"
wait "$pid"
cmp "$SRC" "$OUT"
path_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["path"])' "$1"; }
send_path=$(path_of "$WORK/send.json")
recv_path=$(path_of "$WORK/recv.json")
rm -f "$OUT"
"$SLUICE" copy -q --stats=json "$SRC" "$OUT" 2>"$WORK/file.json"
cmp "$SRC" "$OUT"
file_path=$(path_of "$WORK/file.json")
echo "paths: sender $send_path, receiver $recv_path, file → file $file_path" >&2
for c in nc rw base dz; do loopback "$c" >/dev/null; done
for c in cat rw base; do filecopy "$c" >/dev/null; done
echo "warm-up round done (not counted)" >&2

LOOP=(zc nc rw base dz)
FILE=(zc cat rw base)
declare -A wall cpu
# The order rotates each round, and every other round runs backwards, so that no contender
# always follows the same one.
order() { # ROUND INDEX COUNT: the position to run INDEX-th of COUNT
    if (($1 % 2)); then echo $((($2 + $1) % $3)); else echo $((($3 - 1 - $2 + $1) % $3)); fi
}
for r in $(seq "$ROUNDS"); do
    line="round $r:"
    for i in 0 1 2 3 4; do
        c=${LOOP[$(order "$r" "$i" 5)]}
        read -r w u <<<"$(loopback "$c")"
        wall[loop,$c,$r]=$w
        cpu[loop,$c,$r]=$u
        line+=" loop-$c $(printf '%.2f' "$w")s/$(printf '%.2f' "$u")cpu"
    done
    for i in 0 1 2 3; do
        c=${FILE[$(order "$r" "$i" 4)]}
        read -r w u <<<"$(filecopy "$c")"
        wall[file,$c,$r]=$w
        cpu[file,$c,$r]=$u
        line+=" file-$c $(printf '%.2f' "$w")s/$(printf '%.2f' "$u")cpu"
    done
    # Where the CPU goes: the same loopback copy into /dev/null, without the page-cache write.
    for c in $( ((r % 2)) && echo zc base || echo base zc); do
        read -r w u <<<"$(loopback "$c" /dev/null)"
        wall[null,$c,$r]=$w
        cpu[null,$c,$r]=$u
        line+=" null-$c $(printf '%.2f' "$w")s/$(printf '%.2f' "$u")cpu"
    done
    echo "$line" >&2
done

median() { sort -g | awk '{a[NR]=$1} END {printf "%.2f", (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
range() { sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.2f–%.2f", lo, hi}'; }
# ratios KIND MEASURE A B: the per-round ratios A/B of wall or cpu.
ratios() {
    local -n m=$2
    for r in $(seq "$ROUNDS"); do echo "${m[$1,$3,$r]} / ${m[$1,$4,$r]}" | bc -l; done
}
values() {
    local -n m=$2
    for r in $(seq "$ROUNDS"); do echo "${m[$1,$3,$r]}"; done
}
row() { # LABEL KIND MEASURE A B TARGET
    local list verdict median_
    list=$(ratios "$2" "$3" "$4" "$5")
    median_=$(median <<<"$list")
    verdict=reference
    if [ "$6" != - ]; then
        if (($(echo "$median_ <= $6" | bc -l))); then verdict=met; else verdict=missed; fi
    fi
    echo "| $1 | $median_ | $(range <<<"$list") | $([ "$6" = - ] && echo - || echo "≤ $6") | $verdict |"
}
gib=$(echo "$SIZE_MB / 1024" | bc -l)
per_gib() { # KIND CONTENDER: median CPU seconds per GiB, and their range
    local list
    list=$(values "$1" cpu "$2" | awk -v g="$gib" '{printf "%.3f\n", $1 / g}')
    echo "$(median <<<"$list") ($(range <<<"$list"))"
}
all_rounds() { # KIND CONTENDER: every round's wall/cpu
    for r in $(seq "$ROUNDS"); do printf '%.2f/%.2f ' "${wall[$1,$2,$r]}" "${cpu[$1,$2,$r]}"; done
}

cat <<EOF
### Zero-copy paths (issue 15) — \`Benchmarks/zerocopy.sh\`, $(date -u +%Y-%m-%d), $ROUNDS rounds after one uncounted warm-up

Machine: $(nproc) cores $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //; s/ [0-9]*-Core.*//'), kernel $(uname -r), $(swift --version 2>&1 | head -1 | sed 's/ (.*//'). $SIZE_MB MiB of random bytes,
default chunk size (1M). Paths taken: sender \`$send_path\`, receiver \`$recv_path\`, file → file
\`$file_path\` (from \`--stats=json\`). "today's" is \`sluice\` built from $BASE_REV ($BASE_NOTE); \`--no-zero-copy\` is this build's read/write path. Ratios are per round, then median
and range; CPU is user + system of both ends.

| measure | median | range | target | verdict |
|---|---|---|---|---|
$(row "$SIZE_MB MiB file → loopback → file, wall: \`sluice copy\` / \`nc -N\` → \`nc -l > file\`" loop wall zc nc 0.8)
$(row "the same, CPU seconds: \`sluice copy\` / today's ($BASE_REV)" loop cpu zc base 0.6)
$(row "the same, CPU seconds: \`sluice copy\` / \`--no-zero-copy\`" loop cpu zc rw -)
$(row "the same, CPU seconds: \`sluice copy\` / nc" loop cpu zc nc -)
$(row "the same, wall: \`sluice copy\` / today's" loop wall zc base -)
$(row "the same, wall: today's / nc" loop wall base nc -)
$(row "the same, receiver \`copy --direct\`, CPU seconds / today's" loop cpu dz base 0.6)
$(row "the same, receiver \`copy --direct\`, wall / nc" loop wall dz nc 0.8)
$(row "$SIZE_MB MiB file → loopback → \`/dev/null\`, CPU seconds: \`sluice copy\` / today's" null cpu zc base -)
$(row "$SIZE_MB MiB file → file, wall: \`sluice copy\` / \`cat\`" file wall zc cat -)
$(row "the same, CPU seconds: \`sluice copy\` / \`cat\`" file cpu zc cat -)
$(row "the same, CPU seconds: \`sluice copy\` / today's" file cpu zc base -)
$(row "the same, wall: \`sluice copy\` / today's" file wall zc base -)

CPU seconds per GiB, both ends, median (range): loopback — zero-copy $(per_gib loop zc), \`--no-zero-copy\`
$(per_gib loop rw), today's $(per_gib loop base), nc $(per_gib loop nc), receiver \`--direct\` $(per_gib loop dz); loopback → \`/dev/null\` — zero-copy
$(per_gib null zc), today's $(per_gib null base); file → file — zero-copy
$(per_gib file zc), \`--no-zero-copy\` $(per_gib file rw), today's $(per_gib file base), cat $(per_gib file cat).

Every round, wall s/CPU s — loopback: zero-copy $(all_rounds loop zc); nc $(all_rounds loop nc);
\`--no-zero-copy\` $(all_rounds loop rw); today's $(all_rounds loop base); receiver \`--direct\` $(all_rounds loop dz). File → file: zero-copy
$(all_rounds file zc); cat $(all_rounds file cat); \`--no-zero-copy\` $(all_rounds file rw); today's
$(all_rounds file base). Loopback → \`/dev/null\`: zero-copy $(all_rounds null zc); today's $(all_rounds null base).
EOF
