#!/usr/bin/env bash
# Paired A/B of the GGUF block kernels (kernels/matmul_vnni_blocks.cpp, matmul_avx2_blocks.cpp),
# and at the AMX level of the tiles (matmul_amx.cpp) and packed q8 (matmul_avx512vnni.cpp): a
# baseline revision's files, compiled from that revision's own kernels/ headers with their entry
# points renamed, and the working tree's (from the build's anvil_kernels library), linked into one
# binary that alternates them every pass (tests/bench/kernel_ab.cpp). Prints per case both rates,
# the median new/baseline ratio and whether the outputs are identical bit for bit (exit 1 if not).
#
#   tests/bench/kernel_ab.sh [--rev REV] [--build DIR] [--level vnni|avx2|amx] [--passes N] [CASE...]
#
# REV defaults to HEAD (the working tree's uncommitted change against its last commit), DIR to
# build/gcc, the level to vnni where the CPU has AVX-512 VNNI, N to 21. A CASE is
# FORMAT:ROWSxCOLS:COPIES:TOKENS (FORMAT Q4_0, Q4_K, Q6_K, or Q8 for packed q8 at the vnni and amx
# levels); the default cases are each format's decode product in L2 (1024 x 1024, one copy) and
# streamed (2816 x 1024, 30 copies: 45-65 MB, from L3 where it is that large), one token; at the
# amx level, each format's prefill product of 512 tokens (4096 x 4096). Threads: OMP_NUM_THREADS.
# Run it on an idle machine.
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
[ "$level" != amx ] || grep -q amx_int8 /proc/cpuinfo || { echo "kernel_ab.sh: this CPU has no AMX int8 tiles" >&2; exit 2; }
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
    if [ "$level" = amx ]; then cases=(Q8:4096x4096:1:512 Q4_0:4096x4096:1:512 Q4_K:4096x4096:1:512 Q6_K:4096x4096:1:512)
    else cases=(Q4_0:1024x1024:1:1 Q4_K:1024x1024:1:1 Q6_K:1024x1024:1:1 Q4_0:2816x1024:30:1 Q4_K:2816x1024:30:1 Q6_K:2816x1024:30:1)
    fi
fi
source "$root/tests/bench/ab_baseline.sh"
ab_baseline kernel_ab.sh "$build" "$rev" "$root"
flags=("${ab_flags[@]}")
avx512=(-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni)
# The baseline's AMX entry points renamed wherever its files name them, so that its VNNI files
# call its own tiles (a baseline from before the AMX level has none).
renames=(-Dmatmul_vnni_blocks=matmul_vnni_blocks_baseline -Dmatmul_avx512vnni=matmul_avx512vnni_baseline)
for entry in amx_packed_block amx_q4_0_item amx_q4_k_item amx_q6_k_item; do renames+=(-D$entry=${entry}_baseline); done
objects=("$work/vnni.o" "$work/avx2.o" "$work/q8.o")
g++ "${flags[@]}" "${avx512[@]}" "${renames[@]}" -I"$work/baseline" -c "$work/baseline/kernels/matmul_vnni_blocks.cpp" -o "$work/vnni.o"
g++ "${flags[@]}" "${avx512[@]}" "${renames[@]}" -I"$work/baseline" -c "$work/baseline/kernels/matmul_avx512vnni.cpp" -o "$work/q8.o"
g++ "${flags[@]}" -I"$work/baseline" -Dmatmul_avx2_blocks=matmul_avx2_blocks_baseline \
    -c "$work/baseline/kernels/matmul_avx2_blocks.cpp" -o "$work/avx2.o"
takes_amx=()
# Where the AVX2 level multiplies Q6_K in a layout of its own (Q6_KPacked8Avx2), a baseline that
# has it gets that layout too, an older one Q6_K's VNNI layout.
baseline_defines=()
if grep -q Q6_KPacked8Avx2 "$work/baseline/kernels/weight_matrix.hpp"; then baseline_defines=(-DANVIL_AB_BASELINE_Q6_K_AVX2); fi
# Before QuantizedInput::less_8_sums the Q4_0 products took the activations' group sums as int16.
if ! grep -q less_8_sums "$work/baseline/kernels/matmul.hpp"; then baseline_defines+=(-DANVIL_AB_BASELINE_INT16_SUMS); fi
if grep -q "int n_tokens, bool amx" "$work/baseline/kernels/matmul.hpp"; then
    takes_amx=(-DANVIL_AB_BASELINE_TAKES_AMX)
    g++ "${flags[@]}" "${avx512[@]}" -mamx-tile -mamx-int8 "${renames[@]}" -I"$work/baseline" \
        -c "$work/baseline/kernels/matmul_amx.cpp" -o "$work/amx.o"
    objects+=("$work/amx.o")
elif [ "$level" = amx ]; then
    echo "kernel_ab.sh: the baseline $rev has no AMX level to compare with" >&2; exit 2
fi
g++ "${flags[@]}" "${takes_amx[@]}" "${baseline_defines[@]}" -I"$root" -c "$root/tests/bench/kernel_ab.cpp" -o "$work/kernel_ab.o"
g++ -fopenmp "$work/kernel_ab.o" "${objects[@]}" "$build/kernels/libanvil_kernels.a" -o "$work/kernel_ab"
echo "# baseline $(git -C "$root" rev-parse --short "$rev") against the working tree; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
"$work/kernel_ab" "$level" "$passes" "${cases[@]}"
