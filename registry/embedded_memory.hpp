// The memory anvil-engine holds for an embedded recipe, judged on paper: the target's weights as it
// serves them, its KV cache, and its draft's weights and KV cache. The rules are the engine's own
// (engine/weights.cpp: which tensors are converted and how; engine/kv_cache.cpp; the draft's
// runner in engine/engine_draft.cpp), restated here because the registry may not depend on
// the engine; tests hold the two together. On the CPU, activation buffers, the tokenizer and the
// HTTP server are not counted: they are small beside these (on a GPU the runners' working memory is). Every figure is a model of the engine, never a
// measurement, so a gate that uses it judges on estimated evidence.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "registry/interval.hpp"
#include "registry/model_shape.hpp"
#include "registry/recipe.hpp"

namespace anvil::registry {

// anvil-engine's default block size: a KV block holds this many tokens (engine/engine.hpp).
inline constexpr std::int64_t kEngineKvBlockTokens = 16;

struct MemoryPart {
    std::string what;   // "target weights", "target KV cache", "draft weights", "draft KV cache", "draft"
    std::string how;    // "q8", "f32, 520 blocks of 16 tokens", … (for reasons people read)
    IntInterval bytes;  // both bounds missing when the part could not be sized
};

struct EmbeddedMemory {
    std::vector<MemoryPart> parts;
    IntInterval total;                  // Σ parts: a part that could not be sized leaves it unbounded
    std::vector<std::string> unknowns;  // why, for each part that could not be sized
    // "target weights (q8) [a, b] + target KV cache (f32, 520 blocks of 16 tokens) c + …"
    std::string describe() const;
};

// The shape of a model a recipe names (its config.json), found by whoever can read it: the daemon
// resolves ${MODEL_ROOT}. Unset: no shape is known.
using ModelShapeLookup = std::function<ModelShapeReading(const ModelRef& model)>;

// The estimate for an embedded recipe, from its launch: launch.model, its dtype and the engine
// flags in launch.arguments that size memory (--weights, --kv-dtype, --max-context, --max-seqs,
// --kv-blocks; anvil-engine's defaults when absent), and launch.draft:
//   self:   the target's matrices again in q8 (1 byte and a 4-byte scale per 32 weights; on AVX-512
//           VNNI the rows are padded to 16, hence an interval) or bf16 (2 bytes), and a KV cache of
//           its own as large as the target's (the draft runs the whole network);
//   model:  the draft model's weights as served and its own KV cache, with the target's blocks;
//   layers: nothing (early exit reads the target's weights and writes the target's cache);
//   ngram:  nothing (prompt lookup has no model).
EmbeddedMemory estimate_embedded_memory(const Recipe& recipe, const ModelShapeLookup& shapes);

// On a GPU (an embedded recipe that does not run on the CPU: `--device cuda:0`), anvil-engine
// uploads its weights and fills what --gpu-memory-utilization of the device leaves with KV cache
// (engine/cuda_model_runner.cpp), and refuses to start unless that holds one whole context (the
// model's own without --max-context) for the target and for a draft with a cache of its own. This
// is that least demand: the weights, one context of each cache (or --kv-blocks, when given), and
// each runner's working memory (activations for --max-batch-tokens, logits rows, rope tables and
// 256 MiB for CUDA graphs and cuBLAS: engine/runner.hpp's device_working_bytes).
EmbeddedMemory estimate_embedded_gpu_memory(const Recipe& recipe, const ModelShapeLookup& shapes);

// The share of a GPU the embedded engine may take: the last --gpu-memory-utilization among the
// launch arguments, else the engine's default 0.9; nothing when it is not a number in (0, 1].
std::optional<double> embedded_gpu_fraction(const Launch& launch);

}  // namespace anvil::registry
