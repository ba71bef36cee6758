#!/usr/bin/env bash
# 1 GiB over loopback TLS 1.3: `sluice copy FILE tls:` → `sluice copy tls-listen: FILE` against
# socat `OPENSSL:` → `OPENSSL-LISTEN:`, same certificate (EC P-256, signed by a CA made here),
# same file from the page cache, written to tmpfs. Rounds alternate the order (ABBA); each
# time runs from the client's start to the listener's exit (every byte written). Prints the
# per-round times and the median and range of sluice/socat (target ≤ 0.5, issue 52), and the
# cipher suite each negotiated.
#
#   Benchmarks/tls.sh            # 1024 MiB, 6 rounds
#   SIZE_MB=256 ROUNDS=2 Benchmarks/tls.sh
#   SLUICE=/path/to/sluice Benchmarks/tls.sh   # that build (no build here)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB=${SIZE_MB:-1024}
ROUNDS=${ROUNDS:-6}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
DST=${DST_DIR:-/dev/shm}/sluice-tls-bench.out
[ -n "${SLUICE:-}" ] || { swift build -c release --product sluice >/dev/null && SLUICE=$PWD/.build/release/sluice; }
mkdir -p "$DATA/tls"
SRC=$DATA/random-${SIZE_MB}M.bin
[ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
cat "$SRC" >/dev/null
C=$DATA/tls
if [ ! -s "$C/srv.pem" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$C/ca.key" -out "$C/ca.pem" \
        -days 30 -subj /CN=bench-ca 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$C/srv.key" -out "$C/srv.csr" \
        -subj /CN=localhost 2>/dev/null
    echo "subjectAltName=DNS:localhost,IP:127.0.0.1" >"$C/ext.cnf"
    openssl x509 -req -in "$C/srv.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -out "$C/srv.pem" \
        -days 30 -extfile "$C/ext.cnf" 2>/dev/null
fi
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listening() { for _ in $(seq 200); do ss -ltn "sport = :$1" | grep -q LISTEN && return; sleep 0.02; done; }

run_sluice() {
    local p; p=$(port); rm -f "$DST"
    "$SLUICE" copy -f "tls-listen:127.0.0.1:$p,cert=$C/srv.pem,key=$C/srv.key" "$DST" 2>/dev/null &
    local l=$!; listening "$p"
    local t0; t0=$(date +%s.%N)
    "$SLUICE" copy --stats "$SRC" "tls:127.0.0.1:$p,cafile=$C/ca.pem" 2>"$C/stats"
    wait "$l"
    echo "$(date +%s.%N) - $t0" | bc
    cmp -s "$SRC" "$DST" || { echo "sluice: output differs" >&2; exit 1; }
}
run_socat() {
    local p; p=$(port); rm -f "$DST"
    socat -u "OPENSSL-LISTEN:$p,bind=127.0.0.1,reuseaddr,cert=$C/srv.pem,key=$C/srv.key,verify=0" "CREATE:$DST" &
    local l=$!; listening "$p"
    local t0; t0=$(date +%s.%N)
    socat -u "OPEN:$SRC" "OPENSSL:127.0.0.1:$p,cafile=$C/ca.pem"
    wait "$l"
    echo "$(date +%s.%N) - $t0" | bc
    cmp -s "$SRC" "$DST" || { echo "socat: output differs" >&2; exit 1; }
}
s=(); o=()
for r in $(seq "$ROUNDS"); do
    if ((r % 2)); then s+=("$(run_sluice)"); o+=("$(run_socat)"); else o+=("$(run_socat)"); s+=("$(run_sluice)"); fi
done
rm -f "$DST"
ratios=$(for i in "${!s[@]}"; do echo "scale=4; ${s[$i]} / ${o[$i]}" | bc; done | sort -n)
n=$(echo "$ratios" | wc -l)
median=$(echo "$ratios" | sed -n "$(((n + 1) / 2))p")
echo "sluice seconds: ${s[*]}"
echo "socat seconds:  ${o[*]}"
echo "ratio sluice/socat: median $median, range $(echo "$ratios" | head -1)-$(echo "$ratios" | tail -1) (target <= 0.5)"
echo "sluice's cipher suite: $(grep -o 'TLS_[A-Z0-9_]*' "$C/stats" | head -1 || true)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
