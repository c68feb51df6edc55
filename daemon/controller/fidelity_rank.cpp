// The order candidates are qualified in: the most faithful weights first, so the first default is
// the natural control for the rest.
#include <algorithm>
#include <cctype>

#include "daemon/controller/reconciler.hpp"

namespace anvil::daemon {

namespace {

// The weights a launch asks for: the embedded engine's --weights, vLLM's --dtype/--quantization,
// else the model block's dtype.
std::string weights_of(const registry::Recipe& r) {
    const auto& args = r.launch.arguments;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--weights" && i + 1 < args.size()) return args[i + 1];
        if (args[i].starts_with("--weights=")) return args[i].substr(10);
        if ((args[i] == "--dtype" || args[i] == "--quantization") && i + 1 < args.size()) return args[i + 1];
    }
    return r.launch.model ? r.launch.model->dtype : std::string();
}

}  // namespace

int fidelity_rank(const registry::Recipe& recipe) {
    std::string w = weights_of(recipe);
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    int rank = 3;
    if (w == "f32" || w == "fp32" || w == "float32") rank = 0;
    else if (w == "bf16" || w == "f16" || w == "fp16" || w == "bfloat16" || w == "float16" || w == "auto") rank = 1;
    else if (w == "q8" || w == "int8" || w == "fp8" || w.find("8") != std::string::npos) rank = 2;
    else if (w.empty()) rank = 4;
    // A speculative recipe answers as its weights do, but it is measured against the plain one:
    // right after it, so that the plain one is the control it has to beat.
    return 2 * rank + (recipe.launch.draft ? 1 : 0);
}

}  // namespace anvil::daemon
