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
# -O1, as the sanitizers' authors advise: the sanitized suite is the slowest step, and -O0 makes it slower
# still; asserts are kept and stacks stay readable.
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DANVIL_SANITIZE=ON -DANVIL_FUZZ=ON -DANVIL_BENCH=OFF >/dev/null
cmake --build build/asan -j "$jobs"

# By default a reproducible run: a fixed seed and a fixed number of inputs, so the same tree always
# gives the same verdict (a time limit with a random seed made CI fail on whatever a run happened to
# find). ANVIL_FUZZ_SECONDS=N explores for N seconds with a random seed instead; keep every crash it
# finds, once fixed, in tests/fuzz/regressions, which seeds the corpus of every run.
if [[ -n "${ANVIL_FUZZ_SECONDS:-}" ]]; then
  fuzz_budget=(-max_total_time="$ANVIL_FUZZ_SECONDS")
  echo "== fuzz the document parsers ($ANVIL_FUZZ_SECONDS s, random seed)"
else
  fuzz_budget=(-seed="${ANVIL_FUZZ_SEED:-1}" -runs="${ANVIL_FUZZ_RUNS:-15000}" -max_total_time=600)
  echo "== fuzz the document parsers (${ANVIL_FUZZ_RUNS:-15000} inputs, seed ${ANVIL_FUZZ_SEED:-1})"
fi
corpus=build/asan/fuzz-corpus
rm -rf "$corpus"
mkdir -p "$corpus"
cp ../shared/seeds/* "$corpus"/ 2>/dev/null || true
find ../shared/corpus examples tests/fuzz/regressions -name '*.json' ! -name '*.schema.json' -exec cp {} "$corpus"/ \; 2>/dev/null || true
build/asan/tests/fuzz/fuzz_documents "${fuzz_budget[@]}" -rss_limit_mb=2048 -print_final_stats=0 \
  "$corpus" 2>build/asan/fuzz.log || { tail -50 build/asan/fuzz.log; echo "fuzzing found a crash: see build/asan/fuzz.log"; exit 1; }
grep -E "^#[0-9]+.*DONE" build/asan/fuzz.log | tail -1 || true

echo "== fuzz the safetensors header check"
corpus=build/asan/fuzz-corpus-safetensors
rm -rf "$corpus"
mkdir -p "$corpus"
cp tests/fuzz/seeds/*.safetensors "$corpus"/
cp tests/fuzz/regressions/*.safetensors "$corpus"/ 2>/dev/null || true
build/asan/engine/fuzz_safetensors "${fuzz_budget[@]}" -rss_limit_mb=2048 -print_final_stats=0 \
  "$corpus" 2>build/asan/fuzz-safetensors.log || { tail -50 build/asan/fuzz-safetensors.log; echo "fuzzing found a crash: see build/asan/fuzz-safetensors.log"; exit 1; }

echo "== tests (clang, sanitizers)"
ctest --test-dir build/asan --output-on-failure -j "$jobs"

echo "== tests (gcc)"
ctest --test-dir build/gcc --output-on-failure -j "$jobs"
