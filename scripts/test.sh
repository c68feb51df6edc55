#!/usr/bin/env bash
# Sets up and runs every test: installs the Debian packages (and Chromium with playwright-core for
# the web console's browser test), builds with gcc, runs anvild.service
# under systemd in a container (tests/systemd/run.sh) and runs the suite,
# builds with clang + AddressSanitizer + UBSan (+ libFuzzer targets) and runs the suite again,
# then short, reproducible fuzz runs (registry documents, safetensors and GGUF headers, tokenizer.json,
# NFC, HTTP requests to both servers, structured output's schemas and answers). Exit status is non-zero if anything fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)

# stage NAME: starts the next stage; each one's wall time is listed at the end, so that a run near
# CI's time budget shows where its minutes went.
stage_timings=()
stage_name="install the packages"
stage_started=$SECONDS
stage() {
  stage_timings+=("$((SECONDS - stage_started)) s  $stage_name")
  stage_name=$1
  stage_started=$SECONDS
  if [[ -n "$1" ]]; then echo "== $1"; fi
}

"$root/scripts/install-deps.sh" --browser

stage "build (gcc)"
# -g1 (line tables: stacks still name functions, files and lines) rather than -g: full debug info
# was about a quarter of each file's compile time, and both builds are most of this script's time.
cmake -S . -B build/gcc -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DANVIL_BENCH=ON >/dev/null
cmake --build build/gcc -j "$jobs"

# anvild.service under a real systemd, in a container (skips, saying why, where none can start).
stage "systemd"
tests/systemd/run.sh build/gcc

stage "build (clang, AddressSanitizer + UBSan, fuzz targets)"
# -O1, as the sanitizers' authors advise: the sanitized suite is the slowest step, and -O0 makes it slower
# still; asserts are kept and stacks stay readable (-g1, as above).
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS_DEBUG="-g1 -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DANVIL_SANITIZE=ON -DANVIL_FUZZ=ON -DANVIL_BENCH=OFF >/dev/null
cmake --build build/asan -j "$jobs"

# Each fuzz target gets a fresh corpus of its seed files and runs, by default, a fixed number of
# inputs from a fixed seed rather than for a time with a random seed: a run covers about the same
# ground on any machine instead of whatever chance found (which once failed CI on a new crash).
# ANVIL_FUZZ_SECONDS=N explores for N seconds per target with a random seed instead; keep every
# crash it finds, once fixed, in tests/fuzz/regressions, which seeds every run.
if [[ -n "${ANVIL_FUZZ_SECONDS:-}" ]]; then
  fuzz_budget=(-max_total_time="$ANVIL_FUZZ_SECONDS")
  fuzz_how="$ANVIL_FUZZ_SECONDS s each, random seed"
else
  fuzz_budget=(-seed="${ANVIL_FUZZ_SEED:-1}" -runs="${ANVIL_FUZZ_RUNS:-15000}" -max_total_time=600)
  fuzz_how="${ANVIL_FUZZ_RUNS:-15000} inputs each, seed ${ANVIL_FUZZ_SEED:-1}"
fi
# fuzz NAME BINARY SEED-FILE...: runs BINARY over a corpus of the seed files.
fuzz() {
  local name=$1 binary=$2 corpus=build/asan/fuzz-corpus-$1
  shift 2
  rm -rf "$corpus"
  mkdir -p "$corpus"
  [[ $# -gt 0 ]] && cp "$@" "$corpus"/
  "$binary" "${fuzz_budget[@]}" -rss_limit_mb=2048 -print_final_stats=0 "$corpus" 2>"build/asan/fuzz-$name.log" ||
    { tail -50 "build/asan/fuzz-$name.log"; echo "fuzzing $name found a crash: see build/asan/fuzz-$name.log"; exit 1; }
  echo "   $name: $(grep -Ec '^#[0-9]+.*NEW' "build/asan/fuzz-$name.log") new inputs kept, no crash"
}
stage "fuzz ($fuzz_how): documents, safetensors headers, GGUF headers, tokenizer.json, NFC, HTTP requests, JSON schemas and answers"
mapfile -t document_seeds < <(find ../shared/seeds ../shared/corpus examples tests/fuzz/regressions -type f \
  \( -path '../shared/seeds/*' -o -name '*.json' \) ! -name '*.schema.json' 2>/dev/null)
fuzz documents build/asan/tests/fuzz/fuzz_documents "${document_seeds[@]}"
fuzz safetensors build/asan/engine/fuzz_safetensors tests/fuzz/seeds/*.safetensors $(compgen -G 'tests/fuzz/regressions/*.safetensors' || true)
fuzz gguf build/asan/engine/fuzz_gguf tests/fuzz/seeds/*.gguf $(compgen -G 'tests/fuzz/regressions/*.gguf' || true)
fuzz tokenizer build/asan/engine/fuzz_tokenizer tests/fuzz/seeds/*.tokenizer.json $(compgen -G 'tests/fuzz/regressions/*.tokenizer.json' || true)
fuzz nfc build/asan/tests/fuzz/fuzz_nfc tests/fuzz/seeds/*.nfc.txt $(compgen -G 'tests/fuzz/regressions/*.nfc.txt' || true)
fuzz http build/asan/tests/fuzz/fuzz_http tests/fuzz/seeds/*.http $(compgen -G 'tests/fuzz/regressions/*.http' || true)
fuzz json-schema build/asan/tests/fuzz/fuzz_json_schema tests/fuzz/seeds/*.schema $(compgen -G 'tests/fuzz/regressions/*.schema' || true)

stage "tests (clang, sanitizers)"
ctest --test-dir build/asan --output-on-failure -j "$jobs"

stage "tests (gcc)"
ctest --test-dir build/gcc --output-on-failure -j "$jobs"
stage ""
echo "== wall time by stage ($((SECONDS / 60)) min in all)"
printf '   %s\n' "${stage_timings[@]}"
