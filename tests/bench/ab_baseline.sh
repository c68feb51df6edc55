# Sourced by kernel_ab.sh and attention_ab.sh, the paired A/B harnesses: checks the build, brings its
# kernels library up to date, and unpacks revision REV's kernels/ into "$work/baseline" ($work is
# removed on exit), for a script to compile that revision's files beside the working tree's.
#   ab_baseline NAME BUILD REV ROOT
ab_flags=(-O2 -g1 -DNDEBUG -std=c++20 -fopenmp -mavx2 -mfma -mf16c)
ab_baseline() {
    local name="$1" build="$2" rev="$3" root="$4"
    [ -f "$build/build.ninja" ] || [ -f "$build/Makefile" ] || { echo "$name: $build is not a configured build (see README)" >&2; exit 2; }
    cmake --build "$build" --target anvil_kernels >/dev/null
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/baseline"
    git -C "$root" archive "$rev" kernels | tar -x -C "$work/baseline"
}
