#!/usr/bin/env bash
# Trees of many files: `sluice send` → `sluice receive` against `tar | nc` and an rsync daemon,
# on loopback and, with RTT=1, through a relay that adds 20 ms to every round trip.
#
# Trees (made once in $SLUICE_BENCH_DATA/trees, the same bytes every time: Python's
# random.Random with a fixed seed):
#   a  FILES files (default 10,000) of 1–64 KiB, log-uniform, 10 to a directory (1,000
#      directories, ~150 MB)
#   b  BFILES files (default 100,000) of 1–8 KiB, 100 to a directory; only with BIG=1 (slow)
#   c  CFILES files (default 500) of 128 KiB in one directory (64 MiB)
#
# Rows, each timed from the sender's start to the receiver's exit (the receiver is started
# before the clock, and its end waited for), each writing into a directory never used before:
#   tar      tar cf - DIR | nc -N 127.0.0.1 PORT   →  nc -l PORT | tar xf -   (netcat-openbsd)
#   tarsync  the same, then `sync` (inside the timing)
#   rsync    rsync -a DIR rsync://127.0.0.1:PORT/m/  →  rsync --daemon, a module per run
#   sluice   sluice send --insecure DIR  →  sluice receive --insecure --no-fsync --once
#   fsync    the same with the receiver's default durability (each file flushed before stored)
#   tls      sluice send/receive --key-file KEY --no-fsync (TLS 1.3 with the key's PSK)
#   old      as sluice, with the binary OLD (another build: ONLY=sluice,old OLD=… for an A/B)
#   untar    the receiving end's floor: `tar xf` of the tree's tar file (made beforehand, in the
#            page cache) into the directory, with no network and no sender (loopback only)
# With RTT=1, trees c and a are also sent through Benchmarks/delayrelay.c (built here with
# `cc -O2 -pthread`): every chunk held 10 ms each way, bandwidth unchanged; the relay is
# started before the clock, in front of each run's receiver.
#
# Rounds alternate: every round runs every row once, and the order of the rows turns by one
# each round so that no row always follows the same one. A `sync` precedes each run. What a
# run wrote is checked after the clock (exit statuses 0, file count and bytes equal to the
# source's; with CHECK=1 also `diff -r`), and is deleted only at the end of the script: on
# this VM, creating files soon after deleting a large tree costs 5–10 × the system time. When
# free space runs short (under 3 × a round's worth plus 2 GiB), earlier rounds' copies are
# deleted between rounds, followed by a `sync` and a pause of SETTLE seconds (default 20).
#
# Printed per tree and link: per-round ratios and their median and range over rounds of
#   sluice / tar|nc, sluice(fsync) / tar|nc + sync, sluice / rsync, sluice TLS / sluice,
# then the CPU time per file of each end (user and system, µs, threads included; measured by
# Benchmarks/rusage.c around the sending tar or sluice and the receiving one, not nc nor the
# rsync daemon), every run's seconds, and a machine line; paste it into RESULTS.md.
#
#   Benchmarks/trees.sh                          # ROUNDS=5, trees a and c, on loopback
#   RTT=1 Benchmarks/trees.sh                    # and through the 20 ms relay
#   BIG=1 Benchmarks/trees.sh                    # and tree b (100,000 files)
#   ROUNDS=1 FILES=200 CFILES=20 ONLY=tar,sluice CHECK=1 Benchmarks/trees.sh   # a smoke run
#   Benchmarks/trees.sh --selftest               # the relay: nc through it against nc, ping-pong
#
# Knobs: ROUNDS, FILES, BFILES, CFILES, BIG, RTT (1: loopback and relay; only: the relay
# alone), TREES (e.g. "c" or "a c"; overrides BIG), ONLY (comma-separated rows), CHECK,
# SETTLE, SLUICE_BENCH_DATA (default /tmp/sluice-bench-data), SELFTEST_MB (default 256), RUNS_ROOT
# (where the runs' copies go; default $SLUICE_BENCH_DATA/trees-runs). On a file system with a long
# history (this VM's root), creating files slows 2–7× as a run's copies pile up (ext4's inode
# allocation searching full groups: 0.36 s for a tar xf of tree a, 0.7–2.8 s by the 20th copy);
# a freshly made ext4 stays flat (0.38–0.40 s for 24 copies), e.g. (on this VM, whose balloon hands
# freed memory back to the host, only the first ~4 GiB of new page cache stay fast: past that every
# tool's file creation runs 2-3x slower; keep rows x ROUNDS x the tree's size under that, per run)
#   truncate -s 40G /tmp/fs.img && mkfs.ext4 -q /tmp/fs.img && mount -o loop /tmp/fs.img /mnt/fs
#   RUNS_ROOT=/mnt/fs/runs Benchmarks/trees.sh
#
# Ports: `sluice receive` prints the port it bound (--listen 127.0.0.1:0) only without -q,
# which also prints a line per file; rsync's daemon cannot bind port 0 and `nc -l` does not
# print its port. So every port here is a free one found by binding port 0 and closing it
# (retried if someone takes it first); the relay binds port 0 and prints its port.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-5}
FILES=${FILES:-10000}
BFILES=${BFILES:-100000}
CFILES=${CFILES:-500}
RTT=${RTT:-0}
CHECK=${CHECK:-0}
SETTLE=${SETTLE:-20}
ONLY=${ONLY:-tar,tarsync,rsync,sluice,fsync,tls}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
CACHE=$DATA/trees
if [ -z "${TREES:-}" ]; then
    TREES="a c"
    [ "${BIG:-0}" = 1 ] && TREES="a b c"
fi

need() { command -v "$1" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need nc netcat-openbsd
need rsync rsync
need cc gcc
[ -x "$ROOT/.build/release/sluice" ] || swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice

TMP=$(mktemp -d)
# Processes of the run in progress (the receiver, the relay): stopped if the script stops.
LIVE=()
cleanup() {
    for pid in "${LIVE[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
    if [ -n "${RUNS:-}" ] && [ -d "$RUNS" ]; then echo "trees.sh: the copies are left in $RUNS" >&2; fi
}
trap cleanup EXIT
cc -O2 -pthread -o "$TMP/delayrelay" "$ROOT/Benchmarks/delayrelay.c"
cc -O2 -o "$TMP/rusage" "$ROOT/Benchmarks/rusage.c"
RU=$TMP/rusage

# shellcheck source=Benchmarks/common.sh
. "$ROOT/Benchmarks/common.sh"
# Starts the relay in front of 127.0.0.1:$1; sets RELAY_PID and RELAY_PORT.
start_relay() {
    rm -f "$TMP/relay.port"
    "$TMP/delayrelay" "127.0.0.1:$1" >"$TMP/relay.port" &
    RELAY_PID=$!
    LIVE+=("$RELAY_PID")
    RELAY_PORT=
    for _ in $(seq 500); do
        [ -s "$TMP/relay.port" ] && read -r RELAY_PORT <"$TMP/relay.port" && [ -n "$RELAY_PORT" ] && break
        sleep 0.01
    done
    wait_port "$RELAY_PORT"
}
stop_relay() {
    kill "$RELAY_PID" 2>/dev/null || true
    wait "$RELAY_PID" 2>/dev/null || true
}

# --selftest: the relay's bandwidth (256 MiB with nc, direct and through it, alternating) and
# its added round trip (a 1-byte ping-pong with an echo server, median of 50).
if [ "${1:-}" = --selftest ]; then
    MB=${SELFTEST_MB:-256}
    mkdir -p "$DATA"
    BLOB=$DATA/random-${MB}M.bin
    [ -s "$BLOB" ] || head -c "$((MB << 20))" /dev/urandom >"$BLOB"
    cat "$BLOB" >/dev/null
    nc_run() { # $1: "direct" or "relay"
        local port
        port=$(free_port)
        nc -l 127.0.0.1 "$port" </dev/null >/dev/null &
        local pid=$!
        wait_port "$port"
        local to=$port
        if [ "$1" = relay ]; then
            start_relay "$port"
            to=$RELAY_PORT
        fi
        local t0 t1
        t0=$(now)
        nc -N 127.0.0.1 "$to" <"$BLOB"
        wait "$pid"
        t1=$(now)
        [ "$1" = relay ] && stop_relay
        elapsed "$t0" "$t1"
    }
    for r in 1 2 3; do
        nc_run direct >"$TMP/direct"
        nc_run relay >"$TMP/relay"
        d=$(cat "$TMP/direct")
        l=$(cat "$TMP/relay")
        echo "round $r: $MB MiB nc -N → nc -l: direct ${d} s ($(awk -v s="$d" -v m="$MB" 'BEGIN {printf "%.0f", m * 1.048576 / s}') MB/s), through the relay ${l} s ($(awk -v s="$l" -v m="$MB" 'BEGIN {printf "%.0f", m * 1.048576 / s}') MB/s)"
    done
    python3 - "$TMP/delayrelay" <<'EOF'
import socket, subprocess, sys, threading, time
def echo_server():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
    def serve():
        while True:
            c, _ = s.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            def loop(c=c):
                while True:
                    d = c.recv(65536)
                    if not d:
                        c.close()
                        return
                    c.sendall(d)
            threading.Thread(target=loop, daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1]
def rtt(port, n=50):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(n):
        t = time.monotonic(); c.sendall(b"x"); c.recv(1); times.append(time.monotonic() - t)
    c.close(); times.sort()
    return times[len(times) // 2], times[0], times[-1]
port = echo_server()
relay = subprocess.Popen([sys.argv[1], f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
rport = int(relay.stdout.readline())
d, r = rtt(port), rtt(rport)
print(f"ping-pong, 1 byte, median of 50 (min–max): direct {d[0]*1e3:.3f} ms ({d[1]*1e3:.3f}–{d[2]*1e3:.3f}), "
      f"through the relay {r[0]*1e3:.3f} ms ({r[1]*1e3:.3f}–{r[2]*1e3:.3f}): {(r[0]-d[0])*1e3:.2f} ms added")
relay.kill()
EOF
    exit 0
fi

# Makes tree $1 (a, b or c) in the cache, once; sets TREE_DIR, TREE_FILES and TREE_BYTES.
make_tree() {
    local name=$1 count min max per
    case $name in
    a) count=$FILES min=1024 max=65536 per=10 ;;
    b) count=$BFILES min=1024 max=8192 per=100 ;;
    c) count=$CFILES min=131072 max=131072 per=$CFILES ;;
    *) echo "trees.sh: no tree '$name' (a, b or c)" >&2 && exit 64 ;;
    esac
    TREE_DIR=$CACHE/$name-$count
    if [ ! -s "$TREE_DIR.complete" ]; then
        echo "trees.sh: making tree $name ($count files) in $TREE_DIR" >&2
        rm -rf "$TREE_DIR"
        mkdir -p "$CACHE"
        python3 - "$TREE_DIR" "$count" "$min" "$max" "$per" <<'EOF'
import os, random, sys
root, count, low, high, per = sys.argv[1], *map(int, sys.argv[2:])
rng = random.Random(20261205 + count * 7 + high)
total = 0
for i in range(count):
    folder = os.path.join(root, "d%04d" % (i // per))
    if i % per == 0:
        os.makedirs(folder)
    # Log-uniform between low and high (most files small, as in a source tree): 10,000 of
    # 1–64 KiB make ~150 MB; equal bounds give that size.
    size = int(round(low * (high / low) ** rng.random()))
    with open(os.path.join(folder, "f%06d" % i), "wb") as f:
        f.write(rng.randbytes(size))
    total += size
with open(root + ".complete", "w") as f:
    f.write(f"{count} {total}\n")
EOF
        sync
    fi
    read -r TREE_FILES TREE_BYTES <"$TREE_DIR.complete"
}

RUNS=${RUNS_ROOT:-$DATA/trees-runs}/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$RUNS"
SEQ=0
# A destination directory never used before.
fresh() {
    SEQ=$((SEQ + 1))
    DEST=$RUNS/$SEQ
    mkdir "$DEST"
}

# Checks a run's copy of $TREE_DIR under $DEST (count and bytes; diff -r with CHECK=1).
check_copy() {
    local copy=$DEST/$(basename "$TREE_DIR") got
    got=$(find "$copy" -type f -printf '%s\n' 2>/dev/null | awk '{n++; s+=$1} END {print n+0, s+0}')
    if [ "$got" != "$TREE_FILES $TREE_BYTES" ]; then
        echo "trees.sh: $1: $copy holds $got (files bytes), the source $TREE_FILES $TREE_BYTES" >&2
        exit 1
    fi
    if [ "$CHECK" = 1 ] && ! diff -r "$TREE_DIR" "$copy" >/dev/null; then
        echo "trees.sh: $1: $copy differs from $TREE_DIR" >&2
        exit 1
    fi
}

KEY=$TMP/bench.key
"$SLUICE" keygen "$KEY" >/dev/null 2>&1

# One run of row $1 over link $2 (lo or rtt) into a fresh directory; sets RUN_SECONDS.
run_row() {
    local row=$1 link=$2 port to t0 t1 pid rc=0
    LIVE=()
    fresh
    sync
    for _ in 1 2 3; do
        port=$(free_port)
        case $row in
        tar | tarsync)
            (nc -l 127.0.0.1 "$port" </dev/null | "$RU" "$TMP/receive.cpu" tar xf - -C "$DEST") &
            pid=$!
            ;;
        rsync)
            cat >"$TMP/rsyncd.conf" <<EOF
pid file = $TMP/rsyncd.pid
use chroot = false
uid = $(id -u)
gid = $(id -g)
[m]
    path = $DEST
    read only = false
EOF
            rsync --daemon --no-detach --config="$TMP/rsyncd.conf" --address=127.0.0.1 --port="$port" \
                2>>"$TMP/rsyncd.log" &
            pid=$!
            ;;
        untar)
            break
            ;;
    sluice | tls | fsync | old)
            local opts=(--insecure) bin=$SLUICE
            [ "$row" = tls ] && opts=(--key-file "$KEY")
            [ "$row" = fsync ] || opts+=(--no-fsync)
            [ "$row" = old ] && bin=$OLD
            "$RU" "$TMP/receive.cpu" "$bin" receive -q "${opts[@]}" --once --listen "127.0.0.1:$port" \
                --dir "$DEST" 2>>"$TMP/receive.log" &
            pid=$!
            ;;
        esac
        LIVE+=("$pid")
        wait_port "$port" 2>/dev/null && break
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    to=$port
    if [ "$row" = untar ]; then
        TARBALL=$TMP/$(basename "$TREE_DIR").tar
        if [ ! -s "$TARBALL" ]; then
            tar cf "$TARBALL" -C "$(dirname "$TREE_DIR")" "$(basename "$TREE_DIR")"
            sync
        fi
        cat "$TARBALL" >/dev/null
    fi
    if [ "$link" = rtt ] && [ "$row" != untar ]; then
        start_relay "$port"
        to=$RELAY_PORT
    fi
    rm -f "$TMP/send.cpu" "$TMP/receive.cpu"
    t0=$(now)
    case $row in
    tar | tarsync)
        "$RU" "$TMP/send.cpu" tar cf - -C "$(dirname "$TREE_DIR")" "$(basename "$TREE_DIR")" |
            nc -N 127.0.0.1 "$to" || rc=$?
        wait "$pid" || rc=$?
        [ "$row" = tarsync ] && sync
        ;;
    rsync)
        rsync -a "$TREE_DIR" "rsync://127.0.0.1:$to/m/" || rc=$?
        ;;
    untar)
        "$RU" "$TMP/receive.cpu" tar xf "$TARBALL" -C "$DEST" || rc=$?
        ;;
    sluice | fsync | old)
        local bin=$SLUICE
        [ "$row" = old ] && bin=$OLD
        "$RU" "$TMP/send.cpu" "$bin" send -q --insecure "$TREE_DIR" "127.0.0.1:$to" 2>>"$TMP/send.log" || rc=$?
        wait "$pid" || rc=$?
        ;;
    tls)
        "$RU" "$TMP/send.cpu" "$SLUICE" send -q --key-file "$KEY" "$TREE_DIR" "127.0.0.1:$to" 2>>"$TMP/send.log" ||
            rc=$?
        wait "$pid" || rc=$?
        ;;
    esac
    t1=$(now)
    if [ "$row" = rsync ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    [ "$link" = rtt ] && [ "$row" != untar ] && stop_relay
    if [ "$rc" != 0 ]; then
        echo "trees.sh: $row ($link) exited $rc; logs: $(tail -n 3 "$TMP"/*.log 2>/dev/null)" >&2
        exit 1
    fi
    LIVE=()
    check_copy "$row ($link)"
    RUN_SECONDS=$(elapsed "$t0" "$t1")
    # CPU per file, microseconds: "send-user send-system receive-user receive-system" ("-" where
    # an end was not measured: rsync's daemon, untar's sender).
    RUN_CPU=
    for end in send receive; do
        if [ -s "$TMP/$end.cpu" ]; then
            RUN_CPU+=$(awk -v n="$TREE_FILES" '{printf "%.2f %.2f ", $1 / n, $2 / n}' "$TMP/$end.cpu")
        else
            RUN_CPU+="- - "
        fi
    done
}

link_name() { if [ "$1" = rtt ]; then echo "loopback + 20 ms RTT"; else echo "loopback"; fi; }
median() { sort -g | awk '{a[NR]=$1} END {printf "%.2f", (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
range() { sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.2f–%.2f", lo, hi}'; }
has() { [[ ",$ONLY," == *",$1,"* ]]; }

IFS=, read -r -a ROWS <<<"$ONLY"
for row in "${ROWS[@]}"; do
    case $row in
    tar | tarsync | rsync | sluice | fsync | tls | untar) ;;
    old) [ -x "${OLD:-}" ] || { echo "trees.sh: row old needs OLD=path of another sluice" >&2 && exit 64; } ;;
    *) echo "trees.sh: no row '$row'" >&2 && exit 64 ;;
    esac
done
SETS=()
for tree in $TREES; do
    make_tree "$tree"
    [ "$RTT" = only ] || SETS+=("$tree lo")
done
if [ "$RTT" = 1 ] || [ "$RTT" = only ]; then
    for tree in c a; do
        if [[ " $TREES " == *" $tree "* ]]; then SETS+=("$tree rtt"); fi
    done
fi

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A TIMES CPU
for round in $(seq "$ROUNDS"); do
    # Room for another round? (each run writes a copy of its tree)
    need_kb=0
    for set in "${SETS[@]}"; do
        make_tree "${set%% *}"
        need_kb=$((need_kb + (TREE_BYTES / 1024 + TREE_FILES * 4) * ${#ROWS[@]}))
    done
    avail_kb=$(df -Pk "$RUNS" | awk 'NR==2 {print $4}')
    if ((avail_kb < 3 * need_kb + (2 << 20))); then
        echo "trees.sh: little free space: deleting earlier rounds' copies, then sync and ${SETTLE} s" >&2
        find "$RUNS" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
        sync
        sleep "$SETTLE"
    fi
    for set in "${SETS[@]}"; do
        tree=${set%% *}
        link=${set##* }
        make_tree "$tree"
        n=${#ROWS[@]}
        line="round $round, tree $tree ($TREE_FILES files, $TREE_BYTES bytes), $link:"
        for i in $(seq 0 $((n - 1))); do
            row=${ROWS[$(((i + round - 1) % n))]}
            run_row "$row" "$link"
            s=$RUN_SECONDS
            TIMES[$set,$row]+="$s "
            read -r su ss ru rs <<<"$RUN_CPU"
            CPU[$set,$row,su]+="$su "
            CPU[$set,$row,ss]+="$ss "
            CPU[$set,$row,ru]+="$ru "
            CPU[$set,$row,rs]+="$rs "
            line+=" $row ${s}s"
        done
        echo "$line" >&2
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# Per-round ratios of row $2 over row $3 in set $1, one a line.
ratios() {
    local -a num den
    read -r -a num <<<"${TIMES[$1,$2]:-}"
    read -r -a den <<<"${TIMES[$1,$3]:-}"
    for i in "${!num[@]}"; do awk -v a="${num[$i]}" -v b="${den[$i]}" 'BEGIN {printf "%.3f\n", a / b}'; done
}

title="### Trees of many files — \`Benchmarks/trees.sh\`, $(date -u '+%Y-%m-%d %H:%M UTC'), $ROUNDS alternating rounds"
echo "$title"
echo
echo "Machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r); $(df -PT "$RUNS" | awk 'NR==2 {print $2}') at $RUNS; load average before $LOAD_BEFORE, after $LOAD_AFTER."
echo "\`sluice --version\`: $("$SLUICE" --version | head -n 1); $(rsync --version | head -n 1 | sed 's/  */ /g'); $(tar --version | head -n 1)."
echo
echo "| tree | link | measure | median | range | per round |"
echo "|---|---|---|---|---|---|"
for set in "${SETS[@]}"; do
    tree=${set%% *}
    link=${set##* }
    make_tree "$tree"
    where=$(link_name "$link")
    label="$tree: $TREE_FILES files, $((TREE_BYTES / 1000000)) MB"
    for pair in "sluice tar sluice --no-fsync / tar \| nc" "fsync tarsync sluice (fsync) / tar \| nc + sync" \
        "sluice rsync sluice --no-fsync / rsync daemon" "tls sluice sluice TLS (key file) / plaintext, both --no-fsync" \
        "sluice old sluice --no-fsync / the OLD build, the same" \
        "untar rsync the floor: tar xf alone (no network, no sender) / rsync daemon" \
        "sluice untar sluice --no-fsync / tar xf alone"; do
        read -r a b text <<<"$pair"
        has "$a" && has "$b" || continue
        list=$(ratios "$set" "$a" "$b")
        echo "| $label | $where | $text | $(median <<<"$list") | $(range <<<"$list") | $(echo $list) |"
    done
done
echo
echo "CPU time per file, µs, median (range) over rounds: user and system of the sending end (tar cf for"
echo "tar; nc's not counted) and of the receiving end (tar xf; sluice receive), threads included:"
echo
echo "| tree | link | row | send user | send system | receive user | receive system |"
echo "|---|---|---|---|---|---|---|"
cpu_cell() { # list of values or dashes
    local list=$1
    [[ "$list" == *[0-9]* ]] || { echo "–"; return; }
    list=$(tr ' ' '\n' <<<"$list" | grep -v '^-*$')
    echo "$(median <<<"$list") ($(range <<<"$list"))"
}
for set in "${SETS[@]}"; do
    for row in "${ROWS[@]}"; do
        [ "$row" = rsync ] && continue
        echo "| ${set%% *} | $(link_name "${set##* }") | $row | $(cpu_cell "${CPU[$set,$row,su]:-}") |" \
            "$(cpu_cell "${CPU[$set,$row,ss]:-}") | $(cpu_cell "${CPU[$set,$row,ru]:-}") | $(cpu_cell "${CPU[$set,$row,rs]:-}") |"
    done
done
echo
echo "Seconds per run, in round order:"
echo
for set in "${SETS[@]}"; do
    for row in "${ROWS[@]}"; do
        echo "- tree ${set%% *}, $(link_name "${set##* }"), $row: ${TIMES[$set,$row]}"
    done
done
echo
echo "(copies left in $RUNS are deleted now, after the measurements)" >&2
rm -rf "$RUNS"
