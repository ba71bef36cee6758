#!/usr/bin/env bash
# Fuzz/run.sh [TARGET] [SECONDS]
#
# Builds the libFuzzer targets (this package, with -sanitize=fuzzer,address) and runs each for
# SECONDS (default 30): TARGET is inflate, frames, receiver, sender, parsers or tls (default:
# all six). First every input in Regressions/TARGET is replayed, then libFuzzer starts from a
# scratch copy of Corpus/TARGET (the repository's corpus is never modified). Exits 1 on any
# finding and says where the input that caused it was saved; to keep it, copy it to
# Regressions/TARGET and add a regression test in Tests/SluiceTests.
#
# The frames, receiver and sender targets fuzz with Dictionaries/numbers.dict (sizes and offsets
# at 2^63 - 1, 2^63 and 2^64 - 1), the parsers target with Dictionaries/parsers.dict.
#
# Environment: FUZZ_FINDINGS (default Fuzz/.build/findings) where findings are saved;
# FUZZ_RSS_MB (default 2048) libFuzzer's memory limit. One process per target, one target at
# a time: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")"
fuzz=$PWD

usage() {
    echo "usage: Fuzz/run.sh [inflate|frames|receiver|sender|parsers|tls|all] [SECONDS]" >&2
    exit 64
}
target=${1:-all}
seconds=${2:-30}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || usage
case $target in
    all) targets=(inflate frames receiver sender parsers tls) ;;
    inflate | frames | receiver | sender | parsers | tls) targets=("$target") ;;
    *) usage ;;
esac
dictionary() {
    case $1 in
        frames | receiver | sender) echo "$fuzz/Dictionaries/numbers.dict" ;;
        parsers) echo "$fuzz/Dictionaries/parsers.dict" ;;
    esac
}
product() {
    case $1 in
        inflate) echo FuzzInflate ;;
        frames) echo FuzzFrames ;;
        receiver) echo FuzzReceiver ;;
        sender) echo FuzzSender ;;
        parsers) echo FuzzParsers ;;
        tls) echo FuzzTLSReceiver ;;
    esac
}

# The root package is reached through a link named `sluice`, so its package identity does not
# depend on the name of the checkout (a checkout named `fuzz` would collide with this package).
mkdir -p .build/root
ln -sfn "$(cd .. && pwd)" .build/root/sluice
export SLUICE_ROOT=$fuzz/.build/root/sluice

# -enable-testing: the protocol's decoder and machine are internal to SluiceTransfer. -assert-config
# Debug: assertions stay on in the optimised build. lld: gold cannot link libFuzzer's runtime
# with SwiftPM's renamed entry point.
flags=(
    -c release
    -Xswiftc -sanitize=fuzzer,address
    -Xswiftc -enable-testing
    -Xswiftc -assert-config -Xswiftc Debug
    -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld
)
start=$SECONDS
for t in "${targets[@]}"; do
    echo "fuzz: building $(product "$t")"
    if ! swift build "${flags[@]}" --product "$(product "$t")" >"$fuzz/.build/fuzz-build.log" 2>&1; then
        cat "$fuzz/.build/fuzz-build.log" >&2
        echo "fuzz: the build of $(product "$t") failed" >&2
        exit 1
    fi
    if grep -q "\.swift:[0-9]*:[0-9]*: warning:" "$fuzz/.build/fuzz-build.log"; then
        grep "\.swift:[0-9]*:[0-9]*: warning:" "$fuzz/.build/fuzz-build.log" >&2
        echo "fuzz: the build of $(product "$t") has warnings" >&2
        exit 1
    fi
done
echo "fuzz: built in $((SECONDS - start)) s"

findings=${FUZZ_FINDINGS:-$fuzz/.build/findings}
mkdir -p "$findings"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# libFuzzer reports a crash itself; Swift's backtracer would only slow it down.
export SWIFT_BACKTRACE=enable=no
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

failed=0
for t in "${targets[@]}"; do
    binary=$fuzz/.build/release/$(product "$t")
    log=$scratch/$t.log
    if compgen -G "Regressions/$t/*" >/dev/null; then
        echo "fuzz: $t: replaying $(ls "Regressions/$t" | wc -l) regression inputs"
        if ! "$binary" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" Regressions/"$t"/* >"$log" 2>&1; then
            tail -40 "$log" >&2
            echo "fuzz: $t: a regression input fails again (see above)" >&2
            failed=1
            continue
        fi
    fi
    mkdir -p "$scratch/corpus-$t"
    cp Corpus/"$t"/* "$scratch/corpus-$t/"
    echo "fuzz: $t: fuzzing for $seconds s from $(ls "$scratch/corpus-$t" | wc -l) seeds"
    dict=$(dictionary "$t")
    if "$binary" "$scratch/corpus-$t" -max_total_time="$seconds" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
        ${dict:+-dict="$dict"} -timeout=20 -print_final_stats=1 -artifact_prefix="$findings/$t-" >"$log" 2>&1; then
        grep -E "^#[0-9]+.*DONE|^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" | sed "s/^/fuzz: $t: /"
    else
        grep -v -e "^#[0-9]" -e "^INFO:" -e "NEW_FUNC" "$log" | tail -60 >&2
        saved=$(grep -o "Test unit written to .*" "$log" | sed 's/Test unit written to //' | tail -1)
        echo "fuzz: $t: FINDING; the input is saved at ${saved:-$findings (see the log above)}" >&2
        echo "fuzz: $t: replay it with: $binary ${saved:-INPUT}" >&2
        failed=1
    fi
done
echo "fuzz: done in $((SECONDS - start)) s"
exit $failed
