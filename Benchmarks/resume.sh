#!/usr/bin/env bash
# The cost of a resume (issue 37): a 1 GiB file of which the receiver holds the first half,
# against sending that missing half as a file of its own, alternating rounds (ROUNDS of each,
# each after a `sync`), plaintext (--insecure) and authenticated (TLS 1.3 with a key file's
# PSK). A resume also reads and checks the held half with SHA-256 on both ends (held-sha256),
# beside the rest of the data. Target: the resume costs at most 1.3 × the missing half.
#
#   Benchmarks/resume.sh                 # ROUNDS=7, SIZE_MB=1024
#   ROUNDS=3 SIZE_MB=256 Benchmarks/resume.sh
#
# The held half is planted as the receiver keeps it: `.NAME.sluice-part`, mode 0600, marked
# `user.sluice.resume` with the size and mtime. Prints a Markdown section on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
SIZE_MB=${SIZE_MB:-1024}
DATA=${SLUICE_BENCH_DATA:-/tmp/sluice-bench-data}
swift build -c release >/dev/null
SLUICE=$PWD/.build/release/sluice
mkdir -p "$DATA"
SRC=$DATA/random-${SIZE_MB}M.bin
[ -s "$SRC" ] || head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
HALF_BYTES=$((SIZE_MB << 19))
HALF=$DATA/second-half-${SIZE_MB}M.bin
[ -s "$HALF" ] || tail -c "$HALF_BYTES" "$SRC" >"$HALF"
RECV=$DATA/resume-recv
rm -f "$DATA/resume.key"
"$SLUICE" keygen "$DATA/resume.key" >/dev/null
cat "$SRC" "$HALF" >/dev/null

now() { date +%s.%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 200); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.02
    done
    return 1
}

# Plants the first half of $SRC as the receiver's partial of it.
plant() {
    local name
    name=$(basename "$SRC")
    head -c "$HALF_BYTES" "$SRC" >"$RECV/.$name.sluice-part"
    chmod 600 "$RECV/.$name.sluice-part"
    python3 - "$SRC" "$RECV/.$name.sluice-part" <<'EOF'
import os, sys
st = os.stat(sys.argv[1])
tag = f"v1 {st.st_size} {st.st_mtime_ns // 10**9} {st.st_mtime_ns % 10**9}"
os.setxattr(sys.argv[2], "user.sluice.resume", tag.encode())
EOF
}

# Sends $1 into a fresh $RECV (planting the partial when $2 is "resume"); prints the seconds
# from the sender's start to the receiver's exit, and checks the resume happened.
one() {
    local file=$1 kind=$2
    shift 2
    rm -rf "$RECV"
    mkdir -p "$RECV"
    [ "$kind" = resume ] && plant
    sync
    local port log
    port=$(free_port)
    log=$(mktemp)
    "$SLUICE" receive -q "$@" --listen "127.0.0.1:$port" --dir "$RECV" --once 2>/dev/null &
    local pid=$!
    wait_port "$port"
    local t0 t1
    t0=$(now)
    "$SLUICE" send --stats=json "$@" "$file" "127.0.0.1:$port" 2>"$log"
    wait "$pid"
    t1=$(now)
    if [ "$kind" = resume ] && ! grep -Eq "\"resumed_bytes\": ?$HALF_BYTES[,}]" "$log"; then
        echo "resume.sh: the file was not resumed: $(cat "$log")" >&2
        exit 1
    fi
    rm -f "$log"
    echo "$t1 - $t0" | bc -l
}

stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
range() { printf '%s\n' "$@" | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.2f–%.2f", lo, hi}'; }

rows=""
details=""
for mode in insecure key; do
    if [ "$mode" = insecure ]; then opts=(--insecure); else opts=(--key-file "$DATA/resume.key"); fi
    ratios=()
    halves=()
    resumes=()
    for round in $(seq 1 "$ROUNDS"); do
        # Alternating order: odd rounds the missing half first.
        if ((round % 2)); then
            h=$(one "$HALF" half "${opts[@]}")
            r=$(one "$SRC" resume "${opts[@]}")
        else
            r=$(one "$SRC" resume "${opts[@]}")
            h=$(one "$HALF" half "${opts[@]}")
        fi
        halves+=("$h")
        resumes+=("$r")
        ratios+=("$(echo "$r / $h" | bc -l)")
    done
    label=$([ "$mode" = insecure ] && echo "--insecure" || echo "--key-file (TLS 1.3)")
    rows+="| resume of $((SIZE_MB / 2)) MiB on $SIZE_MB MiB / the missing half alone, $label | $(printf '%.2f' "$(stats "${ratios[@]}")") | $(range "${ratios[@]}") | ≤ 1.3 |"$'\n'
    details+="$label: resume $(printf '%.3f ' "${resumes[@]}")s; half $(printf '%.3f ' "${halves[@]}")s."$'\n\n'
done

cat <<EOF
| measure | median | range | target |
|---|---|---|---|
$rows
$details
EOF
