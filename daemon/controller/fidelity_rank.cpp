// The order candidates are qualified in: the most faithful weights first, so the first default is
// the natural control for the rest.
#include "daemon/controller/reconciler.hpp"

namespace anvil::daemon {

int fidelity_rank(const registry::Recipe& recipe) {
    using registry::WeightsPrecision;
    int rank = 3;
    switch (recipe.weights) {
        case WeightsPrecision::f32: rank = 0; break;
        case WeightsPrecision::half: rank = 1; break;
        case WeightsPrecision::eight_bit: rank = 2; break;
        case WeightsPrecision::fewer_bits:
        case WeightsPrecision::unknown: rank = 3; break;
        case WeightsPrecision::unstated: rank = 4; break;
    }
    // A speculative recipe answers as its weights do, but it is measured against the plain one:
    // right after it, so that the plain one is the control it has to beat.
    return 2 * rank + (recipe.launch.draft ? 1 : 0);
}

}  // namespace anvil::daemon
