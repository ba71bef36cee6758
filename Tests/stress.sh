#!/usr/bin/env bash
# Runs the whole test suite RUNS times in a row (default 10), built once, with two busy loops
# beside it taking the CPU a test would like to have. Stops at the first failing run, says which
# it was, and keeps its log. Proves the suite waits for what it means, not for time to pass.
#
#   Tests/stress.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-stress.XXXXXX")

echo "stress: building"
swift build --build-tests

busy=()
stop_busy() {
    for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_busy EXIT
for _ in 1 2; do
    yes >/dev/null &
    busy+=($!)
done
echo "stress: two busy loops running (pids ${busy[*]}); logs in $log_dir"

for ((run = 1; run <= runs; run++)); do
    log="$log_dir/run-$run.log"
    start=$SECONDS
    if swift test --skip-build >"$log" 2>&1; then
        echo "stress: run $run/$runs passed ($((SECONDS - start)) s)"
    else
        echo "stress: run $run/$runs FAILED ($((SECONDS - start)) s); log: $log" >&2
        grep -E "✘|error:|FAIL" "$log" | head -40 >&2 || true
        exit 1
    fi
done
echo "stress: all $runs runs passed"
