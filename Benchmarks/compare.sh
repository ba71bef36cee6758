#!/usr/bin/env bash
# Measures sluice against its peers in the same run on the same machine and writes the ratios,
# with the machine's description, to Benchmarks/RESULTS.md.
#
#   Benchmarks/compare.sh            # 1 GiB file, real-file corpus, 3 runs each (best kept)
#   SIZE_MB=256 RUNS=1 Benchmarks/compare.sh   # quicker
#
# Every figure is a ratio to a peer timed in this run: the machines are shared and noisy,
# so absolute times mean little from one run to the next.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SIZE_MB=${SIZE_MB:-1024}
RUNS=${RUNS:-3}
SECONDS_NET=${SECONDS_NET:-5}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
OUT=${RESULTS:-$ROOT/Benchmarks/RESULTS.md}

need=()
for p in netcat-openbsd socat pigz iperf3 hyperfine time bc; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

swift build -c release >/dev/null
SLUICE=$ROOT/.build/release/sluice

mkdir -p "$DATA"
SRC=$DATA/random-${SIZE_MB}M.bin
[ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
CORPUS=$DATA/corpus.tar
[ -s "$CORPUS" ] || tar cf "$CORPUS" /usr/share/doc /usr/include 2>/dev/null || true
CORPUS_GZ=$DATA/corpus.tar.gz
[ -s "$CORPUS_GZ" ] || gzip -6 -c "$CORPUS" >"$CORPUS_GZ"
DST=$DATA/dst
RECV=$DATA/recv  # where sluice receive stores
cat "$SRC" "$CORPUS" "$CORPUS_GZ" >/dev/null  # warm the page cache for everyone alike

# One timed run of a shell command, in seconds. Dirty pages of earlier runs are written back
# first (untimed), so no run pays for the one before it.
timed() {
    local t0 t1
    rm -rf "$DST" "$RECV"
    mkdir -p "$RECV"
    sync
    t0=$(date +%s.%N)
    bash -c "$1" >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

min() { if [ -z "$1" ] || (($(echo "$2 < $1" | bc -l))); then echo "$2"; else echo "$1"; fi; }

# best SECONDS of RUNS runs of a shell command
best() {
    local best=""
    for _ in $(seq "$RUNS"); do best=$(min "$best" "$(timed "$1")"); done
    printf '%.3f' "$best"
}

# "SLUICE_BEST PEER_BEST": RUNS runs of each, alternating, so that a noisy spell on the
# machine falls on both rather than on one.
pair() {
    local a="" b=""
    for _ in $(seq "$RUNS"); do
        a=$(min "$a" "$(timed "$1")")
        b=$(min "$b" "$(timed "$2")")
    done
    printf '%.3f %.3f' "$a" "$b"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

rows=()
# row NAME SLUICE_SECONDS PEER_NAME PEER_SECONDS TARGET(max time ratio) [NOTE]
row() {
    local ratio verdict target
    ratio=$(echo "$2 / $4" | bc -l)
    if [ "$5" = "-" ]; then
        verdict=reference
        target="-"
    else
        target="≤ $5"
        if (($(echo "$ratio <= $5" | bc -l))); then verdict=met; else verdict=missed; fi
    fi
    rows+=("| $1 | $2 s | $3 | $4 s | $(printf '%.2f' "$ratio") | $target | $verdict |")
    printf '%-46s sluice %8ss  %-22s %8ss  ratio %.2f (target ≤ %s): %s\n' "$1" "$2" "$3" "$4" "$ratio" "$5" "$verdict"
}

echo "== file copy ($SIZE_MB MiB)"
read -r s p <<<"$(pair "$SLUICE copy -q -f -b 1M '$SRC' '$DST'" "cat '$SRC' > '$DST'")"
row "file → file, 1 MiB chunks (issues 2, 5)" "$s" "cat" "$p" 1.15
read -r s p <<<"$(pair "$SLUICE copy -q -f -b 512 '$SRC' '$DST'" "dd if='$SRC' of='$DST' bs=512 status=none")"
row "file → file, 512 B chunks (issue 2)" "$s" "dd bs=512" "$p" 1.25
read -r s p <<<"$(pair "$SLUICE copy -q -f -b 1M '$SRC' '$DST'" "dd if='$SRC' of='$DST' bs=1M status=none")"
row "file → file, 1 MiB chunks vs dd bs=1M" "$s" "dd bs=1M" "$p" -

echo "== memory bound"
rss_small=$( { /usr/bin/time -f %M "$SLUICE" copy -q -f -b 1M "$CORPUS" "$DST"; } 2>&1 | tail -1)
rss_big=$( { /usr/bin/time -f %M "$SLUICE" copy -q -f -b 1M "$SRC" "$DST"; } 2>&1 | tail -1)
echo "peak RSS: $rss_small KiB for $(du -m "$CORPUS" | cut -f1) MB, $rss_big KiB for $SIZE_MB MiB"

echo "== loopback"
port=$(free_port)
port2=$(free_port)
read -r s p <<<"$(pair "$SLUICE copy -q -f -b 1M tcp-listen:127.0.0.1:$port '$DST' & sleep 0.3; $SLUICE copy -q -b 1M '$SRC' tcp:127.0.0.1:$port; wait" "nc -l 127.0.0.1 $port2 > '$DST' & sleep 0.3; nc -N 127.0.0.1 $port2 < '$SRC'; wait")"
row "file → loopback → file (issue 3)" "$s" "nc -N → nc -l" "$p" 1.2
port=$(free_port)
p=$(best "socat -u TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr CREATE:'$DST' & sleep 0.3; socat -u FILE:'$SRC' TCP:127.0.0.1:$port; wait")
row "file → loopback → file vs socat" "$s" "socat → socat" "$p" -

# Network mode against iperf3, alternating, best rate of each.
iperf_bps=0
sluice_bps=0
for _ in $(seq "$RUNS"); do
    port=$(free_port)
    iperf3 -s -1 -p "$port" -B 127.0.0.1 >/dev/null 2>&1 &
    sleep 0.5
    bps=$(iperf3 -c 127.0.0.1 -p "$port" -l 1M -t "$SECONDS_NET" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8)')
    wait || true
    if (($(echo "$bps > $iperf_bps" | bc -l))); then iperf_bps=$bps; fi
    port=$(free_port)
    "$SLUICE" bench --listen "127.0.0.1:$port" --once >/dev/null 2>&1 &
    sleep 0.5
    bps=$("$SLUICE" bench "tcp:127.0.0.1:$port" --seconds "$SECONDS_NET" -b 1M --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_per_second"])')
    wait || true
    if (($(echo "$bps > $sluice_bps" | bc -l))); then sluice_bps=$bps; fi
done
# time ratio = peer rate / sluice rate
row "memory → loopback → discard, 1 MiB, s per GB (issues 3, 7)" "$(printf '%.3f' "$(echo "1000000000 / $sluice_bps" | bc -l)")" "iperf3 -l 1M" "$(printf '%.3f' "$(echo "1000000000 / $iperf_bps" | bc -l)")" 1.25

echo "== compression (corpus $(du -m "$CORPUS" | cut -f1) MB)"
for level in 1 6; do
    read -r s p <<<"$(pair "$SLUICE copy -q -f --compress=gzip:$level '$CORPUS' '$DST'" "gzip -$level -c '$CORPUS' > '$DST'")"
    row "gzip -$level compression (issue 4)" "$s" "gzip -$level" "$p" 1.053
    p=$(best "pigz -$level -c '$CORPUS' > '$DST'")
    row "gzip -$level compression vs pigz (2 cores)" "$s" "pigz -$level" "$p" -
done
read -r s p <<<"$(pair "$SLUICE copy -q -f -d '$CORPUS_GZ' '$DST'" "gzip -dc '$CORPUS_GZ' > '$DST'")"
row "gzip decompression (issue 4)" "$s" "gzip -d" "$p" 1.053

if "$SLUICE" send --help >/dev/null 2>&1; then
    echo "== send / receive"
    port=$(free_port)
    port2=$(free_port)
    read -r s p <<<"$(pair "$SLUICE receive -q --listen 127.0.0.1:$port --dir '$RECV' --once & sleep 0.3; $SLUICE send -q '$SRC' 127.0.0.1:$port; wait" "nc -l 127.0.0.1 $port2 > '$DST' & sleep 0.3; nc -N 127.0.0.1 $port2 < '$SRC'; wait")"
    row "send → receive, $SIZE_MB MiB (issue 6)" "$s" "nc -N → nc -l > file" "$p" 1.2
    port=$(free_port)
    s=$(best "$SLUICE receive -q --no-fsync --listen 127.0.0.1:$port --dir '$RECV' --once & sleep 0.3; $SLUICE send -q '$SRC' 127.0.0.1:$port; wait")
    row "send → receive --no-fsync (nc does not fsync either)" "$s" "nc -N → nc -l > file" "$p" -
    # The same integrity work as sluice's (a SHA-256 of the bytes on each side), done by peers.
    port=$(free_port)
    p=$(best "nc -l 127.0.0.1 $port | tee >(sha256sum >/dev/null) > '$DST' & sleep 0.3; tee >(sha256sum >/dev/null) < '$SRC' | nc -N 127.0.0.1 $port; wait")
    row "send → receive vs nc with sha256sum on both ends" "$s" "sha256sum+nc → nc+sha256sum" "$p" -
    port=$(free_port)
    port2=$(free_port)
    read -r s p <<<"$(pair "$SLUICE receive -q --listen 127.0.0.1:$port --dir '$RECV' --once & sleep 0.3; $SLUICE send -q -z1 '$CORPUS' 127.0.0.1:$port; wait" "nc -l 127.0.0.1 $port2 | gzip -dc > '$DST' & sleep 0.3; gzip -1 -c '$CORPUS' | nc -N 127.0.0.1 $port2; wait")"
    row "send -z1 corpus (issue 6)" "$s" "gzip -1, nc → nc, gzip -d" "$p" 1.0
fi

echo "== local matrix"
"$SLUICE" bench --json --size "${SIZE_MB}M" -b 1M >"$DATA/matrix.json"
cell() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print([r for r in d["results"] if r["path"]==sys.argv[2]][0]["seconds"])' "$DATA/matrix.json" "$1"; }
s=$(printf '%.3f' "$(cell file)")
p=$(best "cat '$SRC' > '$DST'")
row "bench matrix file → file at 1 MiB (issue 7)" "$s" "cat" "$p" 1.15
row "pipeline vs bare read/write loop, 1 MiB, same process (issue 4)" "$s" "bare loop" "$(printf '%.3f' "$(cell file-bare)")" 1.05

rm -f "$DST"
# A hand-kept "## Earlier runs" section at the end of the file survives regeneration.
earlier=""
if [ -f "$OUT" ]; then earlier=$(sed -n '/^## Earlier runs/,$p' "$OUT"); fi
{
    echo "# Benchmark results"
    echo
    echo "Written by \`Benchmarks/compare.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'). Every ratio is sluice's time over the"
    echo "peer's time in the same run (best of $RUNS runs each, sluice's and the peer's alternating, each"
    echo "after a \`sync\` so that no run pays for the last one's writeback; lower is better; for rates"
    echo "the inverse)."
    echo
    echo "## Machine"
    echo
    echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    echo "- Memory: $(free -g | awk '/Mem:/ {print $2}') GiB; kernel $(uname -r)"
    echo "- $(swift --version 2>&1 | head -1)"
    echo "- Data: $SIZE_MB MiB of random bytes; corpus: tar of /usr/share/doc and /usr/include, $(du -m "$CORPUS" | cut -f1) MB"
    echo
    echo "## Results"
    echo
    echo "| measurement | sluice | peer | peer time | ratio | target | verdict |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "Peak RSS of \`sluice copy -b 1M\`: $rss_small KiB for the corpus, $rss_big KiB for $SIZE_MB MiB: bounded by"
    echo "chunk size and depth, not by input size."
    echo
    echo "## Local matrix (\`sluice bench --size 256M\`)"
    echo
    echo "Drawn by the same run: [matrix.svg](matrix.svg) (MB/s against chunk size, both on log scales, a line per path)."
    echo
    echo '![the local matrix](matrix.svg)'
    echo
    echo '```'
    "$SLUICE" bench --size 256M --svg "$ROOT/Benchmarks/matrix.svg" --force
    echo '```'
    if [ -n "$earlier" ]; then
        echo
        echo "$earlier"
    fi
} >"$OUT"
echo "wrote $OUT"
