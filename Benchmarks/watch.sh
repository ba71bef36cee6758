#!/usr/bin/env bash
# `sluice send --watch` (issue 51) against lsyncd (Debian's, default.rsync with its smallest
# delay) on loopback: the latency from a 4 KiB file's close to its arrival whole at the
# receiver (Benchmarks/watch-probe.py: COUNT files, RATE a second, each awaited before the
# next is due; median and 99th percentile), then the bytes on the wire for renaming a
# directory of 1,000 files (sluice's --stats=json bytes_sent, before and after).
#
# Then a burst of BURST new files moved in at once against a one-shot `send --sync` of them
# (ROUNDS rounds, alternating which goes first), and a quiet tree of QUIET files: the sender's
# CPU and RSS once its first pass is over, and its RSS again after CHANGES changes.
#
#   Benchmarks/watch.sh                  # COUNT=200 RATE=20 SETTLE_MS=50
#   COUNT=1000 BASE=/mnt/bench Benchmarks/watch.sh   # BASE: where the trees go (a fresh file system)
#   PARTS=burst OLD=/path/to/old/sluice Benchmarks/watch.sh   # the burst, this build and OLD in turn
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
COUNT=${COUNT:-200}
RATE=${RATE:-20}
SETTLE_MS=${SETTLE_MS:-50}
SLUICE=${SLUICE:-$ROOT/.build/release/sluice}
# OLD: another build of sluice, whose burst ratio is measured in the same rounds (A/B).
OLD=${OLD:-}
# PARTS: which to run (default all): latency rename burst appear quiet lsyncd.
PARTS=${PARTS:-latency rename burst appear quiet lsyncd}
part() { [[ " $PARTS " == *" $1 "* ]]; }
# shellcheck source=Benchmarks/common.sh
source "$ROOT/Benchmarks/common.sh"
WORK=$(mktemp -d "${BASE:-/tmp}/sluice-watch-bench.XXXXXX")
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
[ -x "$SLUICE" ] || swift build -c release --product sluice >/dev/null
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /cpu: /'
echo "cores: $(nproc); changes: $COUNT at $RATE/s, 4 KiB each; settle $SETTLE_MS ms"

if part latency; then
# sluice: a receiver, a watch, the probe.
mkdir -p "$WORK/s/src/tree" "$WORK/s/dst"
start_sluice_receiver "$WORK/s/dst" "$WORK/s/receiver.log"
"$SLUICE" send --insecure --no-progress --watch --settle "$SETTLE_MS" --stats=json "$WORK/s/src/tree" \
    "127.0.0.1:$SPORT" 2>"$WORK/s/send.log" &
SENDER=$!
PIDS+=("$SENDER")
for _ in $(seq 500); do [ -d "$WORK/s/dst/tree" ] && break; sleep 0.01; done
printf 'sluice --watch: '
python3 Benchmarks/watch-probe.py "$WORK/s/src/tree" "$WORK/s/dst/tree" "$COUNT" "$RATE"

kill -INT "$SENDER"
wait "$SENDER" || true

fi
if part rename; then
# The rename of a directory of 1,000 files: two sessions over the same tree, one quiet, one
# that renames the directory once its first pass is over; the difference of their bytes sent
# (--stats=json) is the rename's.
mkdir -p "$WORK/r/src/tree/big" "$WORK/r/dst"
for i in $(seq 1000); do head -c 1000 /dev/urandom >"$WORK/r/src/tree/big/f$i"; done
start_sluice_receiver "$WORK/r/dst" "$WORK/r/receiver.log"
"$SLUICE" send --insecure --no-progress --sync "$WORK/r/src/tree" "127.0.0.1:$SPORT" 2>/dev/null
session() { # $1: log; $2: rename or not
    "$SLUICE" send --insecure --no-progress --watch --stats=json "$WORK/r/src/tree" "127.0.0.1:$SPORT" 2>"$1" &
    local pid=$!
    PIDS+=("$pid")
    sleep 2 # the first pass (1,001 unchanged entries) is over well before
    if [ "$2" = rename ]; then
        mv "$WORK/r/src/tree/big" "$WORK/r/src/tree/moved"
        for _ in $(seq 3000); do [ -d "$WORK/r/dst/tree/moved" ] && break; sleep 0.01; done
    fi
    kill -INT "$pid"
    wait "$pid" || true
    grep -o '"bytes_sent":[0-9]*' "$1" | tail -1 | cut -d: -f2
}
quiet=$(session "$WORK/r/quiet.log" no)
renamed=$(session "$WORK/r/rename.log" rename)
echo "sluice: renaming a directory of 1,000 files: $((renamed - quiet)) bytes sent ($renamed - $quiet of a quiet session)"
diff -r "$WORK/r/src/tree" "$WORK/r/dst/tree" >/dev/null && echo "sluice: trees equal" || echo "sluice: TREES DIFFER"

fi
if part burst; then
# A burst of BURST (default 10,000) new 1 KiB files, made at once in a directory moved in
# (mkdir elsewhere, fill, mv in: they all exist when the watch sees it), until the last is at
# the receiver, against a one-shot `send --sync` of the same directory into an empty one; ROUNDS
# rounds (default 3), the first with the watch first, the next with the one-shot first, and so on.
BURST=${BURST:-10000}
ROUNDS=${ROUNDS:-3}
mkdir -p "$WORK/b/stage"
for i in $(seq "$BURST"); do head -c 1024 /dev/urandom >"$WORK/b/f$i"; done
# The walk sends names in sorted order: the last one's arrival ends it (then all are counted).
last=$(for i in $(seq "$BURST"); do echo "f$i"; done | LC_ALL=C sort | tail -1)
# A receiver into $1/dst and a watch of $1/src/tree sending to it, the first pass (an empty
# tree) over; their pids in WATCH_RECEIVER and WATCH_SENDER.
start_burst_watch() {
    start_sluice_receiver "$1/dst" "$1/receiver.log" >/dev/null
    WATCH_RECEIVER=${PIDS[-1]}
    "$SLUICE" send --insecure --no-progress --watch "$1/src/tree" "127.0.0.1:$SPORT" >/dev/null 2>&1 &
    WATCH_SENDER=$!
    PIDS+=("$WATCH_SENDER")
    for _ in $(seq 500); do [ -d "$1/dst/tree" ] && break; sleep 0.01; done
    sleep 0.5 # the first pass (an empty tree) is over
}

burst_watch() { # $1: round; prints the seconds until the last file arrived
    local dir="$WORK/b/w$1"
    mkdir -p "$dir/src/tree" "$dir/dst" "$dir/stage/burst"
    cp "$WORK"/b/f* "$dir/stage/burst/"
    sync
    # (Run in $(…): the receiver must not hold its output open.)
    start_burst_watch "$dir"
    local receiver=$WATCH_RECEIVER sender=$WATCH_SENDER
    local seconds
    # (The wait is one process polling stat: a shell loop of `sleep` would take a third of a
    # core from the two processes timed.)
    seconds=$(python3 Benchmarks/move-and-wait.py "$dir/stage/burst" "$dir/src/tree/burst" \
        "$dir/dst/tree/burst/$last")
    kill -INT "$sender"
    wait "$sender" || true
    [ "$(find "$dir/dst/tree/burst" -type f | wc -l)" = "$BURST" ] || echo "burst: NOT ALL ARRIVED" >&2
    kill "$receiver"
    wait "$receiver" 2>/dev/null || true
    rm -rf "$dir"
    echo "$seconds"
}
burst_once() { # $1: round; prints the seconds of a one-shot send --sync of the same files
    local dir="$WORK/b/o$1"
    mkdir -p "$dir/burst" "$dir/dst"
    cp "$WORK"/b/f* "$dir/burst/"
    sync
    start_sluice_receiver "$dir/dst" "$dir/receiver.log" >/dev/null
    local receiver=${PIDS[-1]}
    local t0 t1
    t0=$(now)
    "$SLUICE" send --insecure --no-progress --sync "$dir/burst" "127.0.0.1:$SPORT" >/dev/null 2>&1
    t1=$(now)
    kill "$receiver"
    wait "$receiver" 2>/dev/null || true
    rm -rf "$dir"
    elapsed "$t0" "$t1"
}
burst_pair() { # $1: round; $2: label; runs the watch and the one-shot with $SLUICE, in the round's order
    local w o r
    if [ $(($1 % 2)) = 1 ]; then
        w=$(burst_watch "$1")
        o=$(burst_once "$1")
    else
        o=$(burst_once "$1")
        w=$(burst_watch "$1")
    fi
    r=$(awk -v w="$w" -v o="$o" 'BEGIN {printf "%.3f", w / o}')
    echo "$r" >>"$WORK/b/ratios-$2"
    echo "burst of $BURST files, round $1, $2: watch $w s, one-shot send --sync $o s, ratio $r (load $(cut -d' ' -f1 /proc/loadavg))"
}
NEW=$SLUICE
labels=(new)
[ -n "$OLD" ] && labels+=(old)
for round in $(seq "$ROUNDS"); do
    # With OLD, the two builds in turn: this one first in odd rounds, OLD first in even ones.
    order=("${labels[@]}")
    [ $((round % 2)) = 0 ] && [ -n "$OLD" ] && order=(old new)
    for label in "${order[@]}"; do
        if [ "$label" = old ]; then SLUICE=$OLD; else SLUICE=$NEW; fi
        burst_pair "$round" "$label"
    done
done
SLUICE=$NEW
for label in "${labels[@]}"; do
    sort -n "$WORK/b/ratios-$label" | awk -v l="$label" '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "burst ratio (%s): median %.3f, range %s-%s over %d rounds\n", l, m, a[1], a[NR], NR}'
done

fi
if part appear; then
# A directory of APPEAR (default 100,000) new 1 KiB files moved in at once: the time until its
# first file arrives, until its last, and the sender's peak RSS (VmHWM); APPEAR_ROUNDS rounds
# (default 2), with OLD too, in turn.
APPEAR=${APPEAR:-100000}
APPEAR_ROUNDS=${APPEAR_ROUNDS:-2}
appear_once() { # $1: label; prints its line
    local dir="$WORK/a/$1" last
    mkdir -p "$dir/src/tree" "$dir/dst"
    python3 - "$dir/stage/burst" "$APPEAR" <<'PY'
import os, sys
directory, count = sys.argv[1], int(sys.argv[2])
os.makedirs(directory)
for index in range(count):
    with open(os.path.join(directory, "f%06d" % index), "wb") as f:
        f.write(os.urandom(1024))
PY
    sync
    start_burst_watch "$dir"
    local receiver=$WATCH_RECEIVER sender=$WATCH_SENDER
    last=$(printf 'f%06d' $((APPEAR - 1)))
    local first_s last_s
    { read -r first_s && read -r last_s; } < <(python3 Benchmarks/move-and-wait.py "$dir/stage/burst" \
        "$dir/src/tree/burst" "$dir/dst/tree/burst/f000000" "$dir/dst/tree/burst/$last")
    local peak
    peak=$(awk '/VmHWM/ {print $2}' "/proc/$sender/status")
    kill -INT "$sender"
    wait "$sender" || true
    kill "$receiver"
    wait "$receiver" 2>/dev/null || true
    rm -rf "$dir"
    awk -v l="$1" -v n="$APPEAR" -v f="$first_s" -v s="$last_s" -v p="$peak" \
        -v load="$(cut -d' ' -f1 /proc/loadavg)" \
        'BEGIN {printf "%s: a directory of %d files moved in: first file %.1f ms, last %.3f s, sender peak RSS %.1f MiB (load %s)\n", l, n, f * 1000, s, p / 1024, load}'
}
NEW=$SLUICE
for round in $(seq "$APPEAR_ROUNDS"); do
    order=(new)
    [ -n "$OLD" ] && order=(new old)
    [ -n "$OLD" ] && [ $((round % 2)) = 0 ] && order=(old new)
    for label in "${order[@]}"; do
        if [ "$label" = old ]; then SLUICE=$OLD; else SLUICE=$NEW; fi
        appear_once "$label"
    done
done
SLUICE=$NEW

fi
if part quiet; then
# A quiet tree of QUIET (default 100,000) files in 1,000 directories, watched: the sender's CPU
# over 10 s once its first pass is over, and its RSS then (from /proc).
QUIET=${QUIET:-100000}
mkdir -p "$WORK/q/dst"
python3 - "$WORK/q/src/tree" "$QUIET" <<'PY'
import os, sys
root, count = sys.argv[1], int(sys.argv[2])
for index in range(count):
    directory = os.path.join(root, "d%03d" % (index % 1000))
    if index < 1000:
        os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "f%06d" % index), "wb") as f:
        f.write(b"x" * 100)
PY
start_sluice_receiver "$WORK/q/dst" "$WORK/q/receiver.log"
"$SLUICE" send --insecure --no-progress --sync "$WORK/q/src/tree" "127.0.0.1:$SPORT" 2>/dev/null
"$SLUICE" send --insecure --no-progress --watch "$WORK/q/src/tree" "127.0.0.1:$SPORT" 2>/dev/null &
SENDER=$!
PIDS+=("$SENDER")
sleep 20 # its first pass (100,000 CHECKs) is over well before
ticks() { awk '{print $14 + $15}' "/proc/$SENDER/stat"; }
c0=$(ticks)
t0=$(now)
sleep 10
c1=$(ticks)
t1=$(now)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$SENDER/status")
hz=$(getconf CLK_TCK)
awk -v c="$((c1 - c0))" -v hz="$hz" -v s="$(elapsed "$t0" "$t1")" -v r="$rss" -v n="$QUIET" \
    'BEGIN {printf "quiet tree of %d files: %.2f%% of a core over %.1f s, RSS %.1f MiB\n", n, 100 * c / hz / s, s, r / 1024}'
# CHANGES (default 10,000) changes: files rewritten, 1,000 at a time, each thousand awaited at
# the receiver; then the RSS again.
CHANGES=${CHANGES:-10000}
python3 - "$WORK/q/src/tree" "$WORK/q/dst/tree" "$CHANGES" <<'PY'
import os, sys, time
src, dst, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
for start in range(0, count, 1000):
    names = [os.path.join("d%03d" % (index % 1000), "f%06d" % (index % 100000)) for index in range(start, min(count, start + 1000))]
    for name in names:
        with open(os.path.join(src, name), "wb") as f:
            f.write(b"y" * 200)
    deadline = time.monotonic() + 60
    for name in names:
        while os.stat(os.path.join(dst, name)).st_size != 200 and time.monotonic() < deadline:
            time.sleep(0.001)
PY
sleep 1
rss=$(awk '/VmRSS/ {print $2}' "/proc/$SENDER/status")
awk -v r="$rss" -v n="$CHANGES" 'BEGIN {printf "after %d changes: RSS %.1f MiB\n", n, r / 1024}'
kill -INT "$SENDER"
wait "$SENDER" || true

fi
if part lsyncd; then
# lsyncd, default.rsync, delay 0 (its smallest), to a local directory.
if command -v lsyncd >/dev/null; then
    mkdir -p "$WORK/l/src" "$WORK/l/dst"
    cat >"$WORK/l/lsyncd.conf" <<CONF
settings { nodaemon = true, logfile = "$WORK/l/lsyncd.log", statusFile = "$WORK/l/status", inotifyMode = "CloseWrite" }
sync { default.rsync, source = "$WORK/l/src", target = "$WORK/l/dst", delay = 0 }
CONF
    lsyncd "$WORK/l/lsyncd.conf" >/dev/null 2>&1 &
    PIDS+=($!)
    for _ in $(seq 500); do grep -q "Normal: Finished" "$WORK/l/lsyncd.log" 2>/dev/null && break; sleep 0.01; done
    printf 'lsyncd (delay 0): '
    python3 Benchmarks/watch-probe.py "$WORK/l/src" "$WORK/l/dst" "$COUNT" "$RATE"
else
    echo "lsyncd: not installed (apt-get install -y lsyncd)"
fi
fi
