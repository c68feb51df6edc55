#!/usr/bin/env bash
# Paired A/B of decode attention (kernels/attention.cpp, attention_avx512.cpp): a baseline
# revision's two files, compiled from that revision's kernels/ headers with their entry points
# renamed, and the working tree's (from the build's anvil_kernels library), linked into
# bench_attention, which runs every layer with both in turns (tests/bench/bench_attention.cpp).
# Prints each round's rates and new/baseline, the median ratio and whether the outputs are
# identical bit for bit (exit 1 if not).
#
#   tests/bench/attention_ab.sh [--rev REV] [--build DIR] [bench_attention options...]
#
# REV defaults to HEAD (the working tree's uncommitted change), DIR to build/gcc. The level is
# the machine's best, or ANVIL_KERNELS; threads OMP_NUM_THREADS. Run it on an idle machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rev=HEAD build="$root/build/gcc"
while [ $# -gt 0 ]; do
    case "$1" in
        --rev) rev="$2"; shift 2 ;;
        --build) build="$2"; shift 2 ;;
        *) break ;;
    esac
done
source "$root/tests/bench/ab_baseline.sh"
ab_baseline attention_ab.sh "$build" "$rev" "$root"
flags=("${ab_flags[@]}")
avx512=(-mavx512f -mavx512bw -mavx512vl -mavx512dq)
# Every function the two files define outside an anonymous namespace, renamed.
renames=(-Dattention=attention_baseline -Dattention_heads=attention_heads_baseline
         -Dattention_reference=attention_reference_baseline -Dscore_keys_avx512=score_keys_avx512_baseline
         -Dweigh_values_avx512=weigh_values_avx512_baseline)
g++ "${flags[@]}" "${renames[@]}" -I"$work/baseline" -c "$work/baseline/kernels/attention.cpp" -o "$work/attention.o"
g++ "${flags[@]}" "${avx512[@]}" "${renames[@]}" -I"$work/baseline" -c "$work/baseline/kernels/attention_avx512.cpp" -o "$work/attention_avx512.o"
g++ "${flags[@]}" -DANVIL_AB_BASELINE -I"$root" -I"$root/tests/bench" -c "$root/tests/bench/bench_attention.cpp" -o "$work/bench.o"
g++ -fopenmp "$work/bench.o" "$work/attention.o" "$work/attention_avx512.o" "$build/kernels/libanvil_kernels.a" -o "$work/attention_ab"
echo "# baseline $(git -C "$root" rev-parse --short "$rev") against the working tree; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
"$work/attention_ab" "$@"
