#!/usr/bin/env bash
# Sets up and runs every test: installs the Debian packages, builds with gcc and runs the suite,
# builds with clang + AddressSanitizer + UBSan (+ libFuzzer targets) and runs the suite again,
# then a short fuzz run over the document parsers. Exit status is non-zero if anything fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)

"$root/scripts/install-deps.sh"

echo "== build (gcc)"
cmake -S . -B build/gcc -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANVIL_BENCH=ON >/dev/null
cmake --build build/gcc -j "$jobs"

echo "== build (clang, AddressSanitizer + UBSan, fuzz targets)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DANVIL_SANITIZE=ON -DANVIL_FUZZ=ON -DANVIL_BENCH=OFF >/dev/null
cmake --build build/asan -j "$jobs"

echo "== fuzz the document parsers (${ANVIL_FUZZ_SECONDS:=30} s)"
corpus=build/asan/fuzz-corpus
mkdir -p "$corpus"
cp ../shared/seeds/* "$corpus"/ 2>/dev/null || true
find ../shared/corpus examples tests/fuzz/regressions -name '*.json' ! -name '*.schema.json' -exec cp {} "$corpus"/ \; 2>/dev/null || true
build/asan/tests/fuzz/fuzz_documents -max_total_time="$ANVIL_FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=0 \
  "$corpus" 2>build/asan/fuzz.log || { tail -50 build/asan/fuzz.log; echo "fuzzing found a crash: see build/asan/fuzz.log"; exit 1; }
grep -E "^#[0-9]+.*DONE" build/asan/fuzz.log | tail -1 || true

echo "== tests (clang, sanitizers)"
ctest --test-dir build/asan --output-on-failure -j "$jobs"

echo "== tests (gcc)"
ctest --test-dir build/gcc --output-on-failure -j "$jobs"
