#!/usr/bin/env bash
# Paired A/B of the GGUF block kernels (kernels/matmul_vnni_blocks.cpp, matmul_avx2_blocks.cpp):
# a baseline revision's files, compiled from that revision's own kernels/ headers with their entry
# points renamed, and the working tree's (from the build's anvil_kernels library), linked into one
# binary that alternates them every pass (tests/bench/kernel_ab.cpp). Prints per case both rates,
# the median new/baseline ratio and whether the outputs are identical bit for bit (exit 1 if not).
#
#   tests/bench/kernel_ab.sh [--rev REV] [--build DIR] [--level vnni|avx2] [--passes N] [CASE...]
#
# REV defaults to HEAD (the working tree's uncommitted change against its last commit), DIR to
# build/gcc, the level to vnni where the CPU has AVX-512 VNNI, N to 21. A CASE is
# FORMAT:ROWSxCOLS:COPIES:TOKENS; the default cases are each format's decode product in L2 (1024 x
# 1024, one copy) and streamed (2816 x 1024, 30 copies: 45-65 MB, from L3 where it is that large),
# one token. Threads: OMP_NUM_THREADS. Run it on an idle machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rev=HEAD build="$root/build/gcc" level="" passes=21
while [ $# -gt 0 ]; do
    case "$1" in
        --rev) rev="$2"; shift 2 ;;
        --build) build="$2"; shift 2 ;;
        --level) level="$2"; shift 2 ;;
        --passes) passes="$2"; shift 2 ;;
        --*) echo "kernel_ab.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ -n "$level" ] || { grep -q avx512_vnni /proc/cpuinfo && level=vnni || level=avx2; }
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(Q4_0:1024x1024:1:1 Q4_K:1024x1024:1:1 Q6_K:1024x1024:1:1
                                 Q4_0:2816x1024:30:1 Q4_K:2816x1024:30:1 Q6_K:2816x1024:30:1)
[ -f "$build/build.ninja" ] || [ -f "$build/Makefile" ] || { echo "kernel_ab.sh: $build is not a configured build (see README)" >&2; exit 2; }
cmake --build "$build" --target anvil_kernels >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/baseline"
git -C "$root" archive "$rev" kernels | tar -x -C "$work/baseline"
flags=(-O2 -g1 -DNDEBUG -std=c++20 -fopenmp -mavx2 -mfma -mf16c)
avx512=(-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni)
g++ "${flags[@]}" "${avx512[@]}" -I"$work/baseline" -Dmatmul_vnni_blocks=matmul_vnni_blocks_baseline \
    -c "$work/baseline/kernels/matmul_vnni_blocks.cpp" -o "$work/vnni.o"
g++ "${flags[@]}" -I"$work/baseline" -Dmatmul_avx2_blocks=matmul_avx2_blocks_baseline \
    -c "$work/baseline/kernels/matmul_avx2_blocks.cpp" -o "$work/avx2.o"
takes_amx=()
grep -q "int n_tokens, bool amx" "$work/baseline/kernels/matmul.hpp" && takes_amx=(-DANVIL_AB_BASELINE_TAKES_AMX)
g++ "${flags[@]}" "${takes_amx[@]}" -I"$root" -c "$root/tests/bench/kernel_ab.cpp" -o "$work/kernel_ab.o"
g++ -fopenmp "$work/kernel_ab.o" "$work/vnni.o" "$work/avx2.o" "$build/kernels/libanvil_kernels.a" -o "$work/kernel_ab"
echo "# baseline $(git -C "$root" rev-parse --short "$rev") against the working tree; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
"$work/kernel_ab" "$level" "$passes" "${cases[@]}"
