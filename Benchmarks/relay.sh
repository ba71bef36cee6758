#!/usr/bin/env bash
# Benchmarks/relay.sh [SIZE_MIB] — `sluice relay` on loopback (issue 50).
#
# 1. SIZE_MIB (default 1024) through the relay between two plain TCP clients (a small Python
#    client: the sender sendfile(2)s a file from the page cache, the receiver reads into one
#    buffer and drops the bytes), against the same bytes sent directly between the same two
#    clients; three runs each, alternating, best of each. Prints both rates, their ratio, and the
#    relay's CPU seconds (user + system, from /proc/PID/stat) per GiB relayed.
# 2. The relay's resident memory (VmRSS) with 1,000 connections waiting on nameplates.
#
# Environment: SLUICE (default .build/release/sluice). The machine may be shared: say so with
# the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
SLUICE=${SLUICE:-.build/release/sluice}
SIZE_MIB=${1:-1024}
[ -x "$SLUICE" ] || { echo "relay.sh: build first: swift build -c release --product sluice" >&2; exit 1; }

work=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

dd if=/dev/urandom of="$work/data" bs=1M count="$SIZE_MIB" status=none
cat "$work/data" >/dev/null # into the page cache

cat >"$work/client.py" <<'PY'
import os, socket, sys, threading, time

mode, path = sys.argv[1], sys.argv[2]
size = os.path.getsize(path)

def line(sock):
    out = b""
    while not out.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            raise SystemExit("relay closed: %r" % out)
        out += byte
    return out.decode()

def receive(sock, result):
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    got = 0
    while True:
        n = sock.recv_into(view)
        if n == 0:
            break
        got += n
    result.append(got)

def send(sock):
    with open(path, "rb") as f:
        sock.sendfile(f)
    sock.shutdown(socket.SHUT_WR)

if mode == "relay":
    port = int(sys.argv[3])
    sender = socket.create_connection(("127.0.0.1", port))
    sender.sendall(b"SLUICE-RELAY 1 OPEN\n")
    nameplate = line(sender).split()[1]
    receiver = socket.create_connection(("127.0.0.1", port))
    receiver.sendall(b"SLUICE-RELAY 1 JOIN %s\n" % nameplate.encode())
    assert line(receiver) == "PAIRED\n" and line(sender) == "PAIRED\n"
else:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()

result = []
start = time.monotonic()
reader = threading.Thread(target=receive, args=(receiver, result))
reader.start()
send(sender)
reader.join()
seconds = time.monotonic() - start
assert result[0] == size, (result, size)
print("%.6f" % seconds)
PY

cat >"$work/waiting.py" <<'PY'
import socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"SLUICE-RELAY 1 OPEN\n")
    reply = b""
    while not reply.endswith(b"\n"):
        reply += s.recv(1)
    assert reply.startswith(b"NAMEPLATE "), reply
    held.append(s)
print("ready", flush=True)
sys.stdin.readline()
PY

"$SLUICE" relay --listen 127.0.0.1:0 --max-per-address 2000 --max-nameplates-per-address 2000 -q 2>"$work/relay.log" &
relay=$!
PIDS+=("$relay")
port=
for _ in $(seq 500); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$work/relay.log" | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && break
    sleep 0.01
done
[ -n "$port" ] || { echo "relay.sh: the relay printed no port" >&2; exit 1; }

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$relay/stat"; }

best_relay=
best_direct=
relay_ticks=0
for run in 1 2 3; do
    before=$(cpu)
    t=$(python3 "$work/client.py" relay "$work/data" "$port")
    after=$(cpu)
    relay_ticks=$((relay_ticks + after - before))
    d=$(python3 "$work/client.py" direct "$work/data")
    echo "run $run: relay $t s, direct $d s"
    best_relay=$(awk -v a="$t" -v b="${best_relay:-$t}" 'BEGIN {print (a < b ? a : b)}')
    best_direct=$(awk -v a="$d" -v b="${best_direct:-$d}" 'BEGIN {print (a < b ? a : b)}')
done

awk -v mib="$SIZE_MIB" -v r="$best_relay" -v d="$best_direct" -v t="$relay_ticks" -v hz="$ticks" 'BEGIN {
    printf "through the relay: %.0f MiB/s (best of 3)\n", mib / r
    printf "direct:            %.0f MiB/s (best of 3)\n", mib / d
    printf "ratio relay/direct: %.2f\n", d / r
    printf "relay CPU: %.3f s per GiB (user + system over 3 runs)\n", t / hz / (3 * mib / 1024)
}'

exec 3> >(python3 "$work/waiting.py" "$port" 1000 >"$work/waiting.out")
for _ in $(seq 3000); do
    grep -q ready "$work/waiting.out" 2>/dev/null && break
    sleep 0.01
done
grep -q ready "$work/waiting.out" || { echo "relay.sh: the 1,000 waiting clients did not connect" >&2; exit 1; }
rss=$(awk '/VmRSS/ {print $2}' "/proc/$relay/status")
echo "relay RSS with 1,000 waiting nameplates: $rss KiB ($((rss / 1024)) MiB)"
exec 3>&-
grep -m1 'model name' /proc/cpuinfo
