#!/usr/bin/env bash
# Builds (Release) and runs every benchmark, printing each one's figures and its ratio against the
# baseline it measures in the same run. Usage: tests/bench/run.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-bench}
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANVIL_BENCH=ON >/dev/null
cmake --build "$build" >/dev/null
status=0
for bench in "$build"/tests/bench/bench_*; do
  [ -x "$bench" ] || continue
  echo "== $(basename "$bench")"
  "$bench" || status=1
done
exit $status
