#!/usr/bin/env bash
# The cost of a resume (issue 37): a 1 GiB file of which the receiver holds about half, against
# sending the missing bytes as a file of their own, alternating rounds (ROUNDS of each, each
# after a `sync`), plaintext (--insecure) and authenticated (TLS 1.3 with a key file's PSK).
# Target: the resume costs at most 1.3 × the missing bytes alone.
#
# The partial is made as users make one: a real `sluice send` (rate-limited so that it can be
# caught) interrupted with SIGINT once the receiver holds half the file. Authenticated, the
# sender's resume key (kept in $DATA/state) vouches for what the receiver holds, and nothing
# is read back (`vouched_bytes`, checked); with --insecure no token is sent, and both ends read
# the held part and check it with SHA-256 beside the rest.
#
#   Benchmarks/resume.sh                 # ROUNDS=7, SIZE_MB=1024
#   ROUNDS=3 SIZE_MB=256 Benchmarks/resume.sh
#
# Prints a Markdown section on stdout.
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
SIZE_BYTES=$((SIZE_MB << 20))
HALF_BYTES=$((SIZE_MB << 19))
REST=$DATA/resume-rest.bin
RECV=$DATA/resume-recv
export XDG_STATE_HOME=$DATA/state
rm -f "$DATA/resume.key"
"$SLUICE" keygen "$DATA/resume.key" >/dev/null
cat "$SRC" >/dev/null

now() { date +%s.%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 200); do
        ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.02
    done
    return 1
}

# Leaves in a fresh $RECV the receiver's partial of $SRC, holding at least half of it: a send
# to a receiver on port $RPORT interrupted once it got there. Prints the bytes held.
interrupted() {
    local port log held
    for _ in 1 2 3; do
        rm -rf "$RECV"
        mkdir -p "$RECV"
        port=$RPORT
        "$SLUICE" receive -q "$@" --listen "127.0.0.1:$port" --dir "$RECV" 2>/dev/null &
        local receiver=$!
        wait_port "$port"
        "$SLUICE" send -q --rate-limit 400M "$@" "$SRC" "127.0.0.1:$port" 2>/dev/null &
        local sender=$!
        held=0
        while kill -0 "$sender" 2>/dev/null; do
            held=$(stat -c %s "$RECV/.$(basename "$SRC").sluice-part" 2>/dev/null || echo 0)
            if [ "$held" -ge "$HALF_BYTES" ]; then
                kill -INT "$sender"
                break
            fi
            sleep 0.01
        done
        wait "$sender" || true
        kill -INT "$receiver"
        wait "$receiver" || true
        held=$(stat -c %s "$RECV/.$(basename "$SRC").sluice-part" 2>/dev/null || echo 0)
        if [ "$held" -ge "$HALF_BYTES" ] && [ "$held" -lt "$SIZE_BYTES" ]; then
            echo "$held"
            return 0
        fi
    done
    echo "resume.sh: could not interrupt a send at half the file" >&2
    exit 1
}

# Sends $1 into $RECV (kept as it is when $2 is "resume", else fresh) with the rest of the
# arguments; prints the seconds from the sender's start to the receiver's exit, and for a
# resume checks that $3 bytes were resumed and, authenticated, vouched for. A resume goes to
# the receiver at the address the interrupted send used ($RPORT): the sender's tokens are bound
# to the receiver as it names it.
one() {
    local file=$1 kind=$2 held=$3
    shift 3
    if [ "$kind" != resume ]; then
        rm -rf "$RECV"
        mkdir -p "$RECV"
    fi
    sync
    local port log
    port=$(free_port)
    [ "$kind" = resume ] && port=$RPORT
    log=$(mktemp)
    "$SLUICE" receive -q "$@" --listen "127.0.0.1:$port" --dir "$RECV" --once 2>/dev/null &
    local pid=$!
    wait_port "$port"
    local t0 t1
    t0=$(now)
    "$SLUICE" send --stats=json "$@" "$file" "127.0.0.1:$port" 2>"$log"
    wait "$pid"
    t1=$(now)
    if [ "$kind" = resume ]; then
        local vouched=0
        [ "$1" = --insecure ] || vouched=$held
        if ! grep -Eq "\"resumed_bytes\": ?$held[,}]" "$log" || ! grep -Eq "\"vouched_bytes\": ?$vouched[,}]" "$log"; then
            echo "resume.sh: not resumed as expected ($held bytes held): $(cat "$log")" >&2
            exit 1
        fi
        cmp -s "$file" "$RECV/$(basename "$file")" || { echo "resume.sh: the resumed file differs" >&2; exit 1; }
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
    helds=()
    for round in $(seq 1 "$ROUNDS"); do
        RPORT=$(free_port)
        held=$(interrupted "${opts[@]}")
        helds+=("$held")
        tail -c "$((SIZE_BYTES - held))" "$SRC" >"$REST"
        cat "$REST" >/dev/null
        # The partial waits aside while the rest goes alone; alternating order: odd rounds the
        # rest first.
        rm -rf "$RECV.kept"
        mv "$RECV" "$RECV.kept"
        if ((round % 2)); then
            h=$(one "$REST" rest 0 "${opts[@]}")
            rm -rf "$RECV"
            mv "$RECV.kept" "$RECV"
            r=$(one "$SRC" resume "$held" "${opts[@]}")
        else
            rm -rf "$RECV"
            mv "$RECV.kept" "$RECV"
            r=$(one "$SRC" resume "$held" "${opts[@]}")
            h=$(one "$REST" rest 0 "${opts[@]}")
        fi
        halves+=("$h")
        resumes+=("$r")
        ratios+=("$(echo "$r / $h" | bc -l)")
    done
    label=$([ "$mode" = insecure ] && echo "--insecure (held part checked with SHA-256)" || echo "--key-file (TLS 1.3; vouched by the resume key)")
    rows+="| resume of about $((SIZE_MB / 2)) MiB on $SIZE_MB MiB / the missing bytes alone, $label | $(printf '%.2f' "$(stats "${ratios[@]}")") | $(range "${ratios[@]}") | ≤ 1.3 |"$'\n'
    details+="$label: held $(printf '%s ' "${helds[@]}")bytes; resume $(printf '%.3f ' "${resumes[@]}")s; rest alone $(printf '%.3f ' "${halves[@]}")s."$'\n\n'
done
rm -rf "$RECV" "$RECV.kept" "$REST"

cat <<EOF
| measure | median | range | target |
|---|---|---|---|
$rows
$details
EOF
