#!/usr/bin/env bash
# Every GPU check and benchmark in one call, on a machine with an NVIDIA GPU and the CUDA toolkit:
# builds what they need (optimised, its own build directory), runs the CUDA kernels' checks against
# the CPU path, their benchmark (copy bandwidth, products, decode tokens/s), then the GPU inventory
# and collective probe checks where they build in time, and prints a short table last.
#
# Usage: tests/device/run.sh [build-dir]          (default: build/device)
# Environment:
#   ANVIL_CUDA_ARCHITECTURES  what nvcc builds for (default 90: Hopper, H100/H200)
#   ANVIL_DEVICE              the device to use (default cuda:0)
#   ANVIL_FULL_BUILD_SECONDS  time allowed to build anvil_tests and anvil for the [gpu] checks
#                             (default 240; 0 skips them)
#   ANVIL_REUSE_BUILD=1       run what build-dir already holds: no configure, no build (a rerun)
# Exit status: 0 when every step that ran passed; steps that could not run say why in the table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/device}
arch=${ANVIL_CUDA_ARCHITECTURES:-90}
device=${ANVIL_DEVICE:-cuda:0}
full_build_seconds=${ANVIL_FULL_BUILD_SECONDS:-240}
jobs=$(nproc)
logs=$build/device-logs
mkdir -p "$logs"
export PATH="$PATH:/usr/local/cuda/bin"
started=$(date +%s)

rows=()        # "step|result|detail" for the table
failures=0
row() { rows+=("$1|$2|$3"); }

print_table() {
  # A device machine's harness collects what is left under $OUT: the logs go there too.
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp -r "$logs" "$OUT/device-logs" 2>/dev/null || true; fi
  echo
  echo "== device run: $(( $(date +%s) - started )) s, logs in $logs"
  printf '%-34s %-9s %s\n' "step / check" "result" "detail"
  printf '%-34s %-9s %s\n' "------------" "------" "------"
  local line
  for line in "${rows[@]}"; do
    IFS='|' read -r name result detail <<<"$line"
    printf '%-34s %-9s %s\n' "$name" "$result" "$detail"
  done
}
trap print_table EXIT

# step NAME SECONDS COMMAND...: runs it with a time limit, its output in $logs/NAME.log (and on the
# terminal); records pass, FAIL or TIMEOUT. Returns the command's status.
step() {
  local name=$1 seconds=$2
  shift 2
  local begin status=0
  begin=$(date +%s)
  echo "== $name (limit ${seconds} s): $*"
  set +e
  timeout --kill-after=10 "$seconds" "$@" 2>&1 | tee "$logs/$name.log"
  status=${PIPESTATUS[0]}
  set -e
  local took=$(( $(date +%s) - begin ))
  if [ "$status" -eq 0 ]; then
    row "$name" pass "${took} s"
  elif [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    row "$name" TIMEOUT "killed after ${seconds} s"
    failures=$((failures + 1))
  else
    row "$name" FAIL "exit ${status} after ${took} s: see $logs/$name.log"
    failures=$((failures + 1))
  fi
  return "$status"
}

# What the driver sees, before anything else.
if command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1 || true)
  row "nvidia-smi" info "${gpu:-no answer}"
else
  row "nvidia-smi" absent "not on PATH"
fi

reuse=${ANVIL_REUSE_BUILD:-0}
if [ "$reuse" = 1 ]; then
  row "configure + build" reused "$build"
else
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  # -O2 for the C++ as every other build of the project: GCC 12 at -O3 (Release) raises false
  # -Wrestrict and -Warray-bounds errors inside std::string in the registry's code.
  step configure 180 cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" \
    -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O3 -DNDEBUG" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DANVIL_BENCH=ON -DANVIL_SANITIZE=OFF -DANVIL_FUZZ=OFF || exit 1
fi
grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$build/CMakeCache.txt" || {
  row "cuda toolkit" FAIL "configure found no nvcc: the CUDA kernels are not built"
  failures=$((failures + 1))
  exit 1
}

# The CUDA kernels: their own small test binary (it needs only the kernels and Catch2) and the
# benchmark (which links the registry and state libraries too) build in a minute or two, each on
# its own so that one failing to build does not stop the other from running.
tests_built=1
bench_built=1
engine_checks_built=1
engine_bench_built=1
if [ "$reuse" != 1 ]; then
  step build-cuda-checks 300 cmake --build "$build" -j "$jobs" --target anvil_cuda_tests || tests_built=0
  step build-cuda-bench 300 cmake --build "$build" -j "$jobs" --target bench_cuda_kernels || bench_built=0
  # The GPU runner (--device cuda:N): its checks against the NumPy reference and the CPU runner, and
  # bench_engine --device (the engine library, without the daemon's).
  step build-engine-checks 300 cmake --build "$build" -j "$jobs" --target anvil_cuda_engine_tests || engine_checks_built=0
  step build-engine-bench 300 cmake --build "$build" -j "$jobs" --target bench_engine || engine_bench_built=0
fi

if [ "$tests_built" = 1 ]; then
  if step cuda-checks 240 "$build/tests/anvil_cuda_tests" "[cuda]" --durations no; then :; fi
fi
# The worst error of each check, as a fraction of its stated bound (1 = the bound; counts for the
# bitwise comparisons), from the "cuda-error" lines the checks print.
if [ "$tests_built" = 1 ] && [ -s "$logs/cuda-checks.log" ]; then
  if grep -q "skipped" "$logs/cuda-checks.log"; then
    row "  (device)" SKIPPED "no CUDA device: the device cases passed without running (see the log)"
  fi
  while read -r check worst; do
    result=ok
    awk -v w="$worst" -v c="$check" 'BEGIN { exit !((c ~ /differing/ && w > 0) || w > 1) }' && result=OVER
    row "  $check" "$result" "worst error / bound: $worst"
  done < <(awk '$1 == "cuda-error" { if (!($2 in worst) || $3 > worst[$2]) worst[$2] = $3 }
                END { for (c in worst) print c, worst[c] }' "$logs/cuda-checks.log" | sort)
fi

summary=$logs/bench-summary.txt
rm -f "$summary"
if [ "$bench_built" = 1 ]; then
  if step cuda-bench 300 "$build/tests/bench/bench_cuda_kernels" --device "$device" --summary "$summary"; then :; fi
fi
value() { awk -v k="$1" '$1 == k { print $2 }' "$summary"; }
if [ -s "$summary" ] && [ "$(value device)" = none ]; then
  row "  device" SKIPPED "no CUDA device: nothing measured"
elif [ -s "$summary" ]; then
  row "  device" info "$(value device)"
  row "  copy bandwidth" info "$(value copy_gbps) GB/s (device to device, read + write)"
  for type in bf16 q8; do
    for shape in wq wk gate down lm_head; do
      pct=$(value "matvec_${type}_${shape}_pct_copy")
      [ -n "$pct" ] && row "  matvec $type $shape x1" info "${pct}% of copy bandwidth"
    done
  done
  for key in attention_b1_ctx1024 attention_b1_ctx8192 attention_b64_ctx1024 attention_b64_ctx8192; do
    pct=$(value "${key}_pct_copy")
    [ -n "$pct" ] && row "  $key" info "${pct}% of copy bandwidth (unique KV bytes)"
  done
  b1=$(value decode_b1_pct_copy)
  if [ -n "$b1" ]; then
    verdict=$(awk -v p="$b1" 'BEGIN { print (p >= 80 ? "ok" : "BELOW") }')
    row "  decode batch 1" "$verdict" "$(value decode_b1_tokens_per_s) tokens/s, ${b1}% of copy (target >= 80%)"
  fi
  ratio=$(value decode_b64_over_b1)
  if [ -n "$ratio" ]; then
    verdict=$(awk -v r="$ratio" 'BEGIN { print (r >= 20 ? "ok" : "BELOW") }')
    row "  decode batch 64" "$verdict" "$(value decode_b64_tokens_per_s) tokens/s, ${ratio}x batch 1 (target >= 20x)"
  fi
fi

# The engine on the GPU: anvil-engine's runner against the reference, then its decode speed.
if [ "$engine_checks_built" = 1 ]; then
  if step cuda-engine-checks 240 "$build/tests/anvil_cuda_engine_tests" "[cuda]" --durations no; then :; fi
  if grep -qs "skipped" "$logs/cuda-engine-checks.log"; then
    row "  (device)" SKIPPED "no CUDA device: the engine's device cases passed without running (see the log)"
  fi
fi
# "decode NAME batch 1 ... fraction F" lines: the runner's batch-1 decode over copy bandwidth / bytes
# per token (target >= 0.8), and the batch-32 and prefill figures as they are.
engine_rows() {
  local log=$1 model=$2
  while read -r format rate fraction; do
    verdict=$(awk -v f="$fraction" 'BEGIN { print (f >= 0.8 ? "ok" : "BELOW") }')
    row "  $model $format batch 1" "$verdict" "$rate tokens/s, $fraction of copy bandwidth / bytes per token (target >= 0.8)"
  done < <(awk '$1 == "decode" && $3 == "batch" && $4 == "1" { print $2, $5, $NF }' "$log")
  while read -r format rate; do
    row "  $model $format batch 32" info "$rate tokens/s aggregate"
  done < <(awk '$1 == "decode" && $3 == "batch" && $4 == "32" { print $2, $5 }' "$log")
  while read -r format length rate; do
    row "  $model $format prefill $length" info "$rate tokens/s"
  done < <(awk '$1 == "prefill" { print $2, $3, $5 }' "$log")
}
if [ "$engine_bench_built" = 1 ] && grep -qs "no CUDA device" "$logs/cuda-checks.log" "$logs/cuda-engine-checks.log"; then
  row "engine-bench" SKIPPED "no CUDA device: nothing measured"
elif [ "$engine_bench_built" = 1 ]; then
  if step engine-bench 180 "$build/tests/bench/bench_engine" --device "$device" --weights bf16,q8 --tokens 64; then :; fi
  [ -s "$logs/engine-bench.log" ] && engine_rows "$logs/engine-bench.log" bench
  # A generated model of 8.7 GB (bf16; Llama 3 8B's layer shapes, 20 layers), written once under the build.
  if step engine-bench-large 300 "$build/tests/bench/bench_engine" --device "$device" --preset large --weights bf16,q8 \
    --tokens 32 --keep "$build/models"; then :; fi
  [ -s "$logs/engine-bench-large.log" ] && engine_rows "$logs/engine-bench-large.log" large
fi

# The GPU inventory and collective probe (kernels/hardware): they live in the whole test binary and the
# CLI, which take minutes to build; given what is left of the budget.
if [ "$full_build_seconds" -le 0 ]; then
  row "[gpu] checks" skipped "ANVIL_FULL_BUILD_SECONDS=0"
  exit $(( failures > 0 ))
fi
targets=(anvil_tests anvil)
grep -qs 'anvil-collective-probe' "$build/build.ninja" "$build/Makefile" && targets+=(anvil-collective-probe)
built=0
if [ "$reuse" = 1 ]; then
  [ -x "$build/tests/anvil_tests" ] && built=1
elif step build-full "$full_build_seconds" cmake --build "$build" -j "$jobs" --target "${targets[@]}"; then
  built=1
fi
if [ "$built" = 1 ]; then
  if step gpu-checks 180 "$build/tests/anvil_tests" "[gpu]" --durations no; then :; fi
  cli=$build/daemon/anvil
  if [ -x "$cli" ]; then
    if "$cli" --help 2>&1 | grep -q "gpus"; then
      if step anvil-gpus 60 "$cli" gpus; then :; fi
    else
      row "anvil gpus" absent "the CLI has no gpus command yet"
    fi
    if "$cli" --help 2>&1 | grep -q "probe"; then
      if step anvil-probe-collectives 180 "$cli" probe collectives; then :; fi
    else
      row "anvil probe collectives" absent "the CLI has no probe command yet"
    fi
  else
    row "anvil CLI" absent "not built at $cli"
  fi
fi
exit $(( failures > 0 ))
