// The shape of a model that sizes anvil-engine's memory for it: the config.json fields (or a GGUF
// file's metadata) its tensors and KV cache follow. Read here on the engine's own rules (engine/config.cpp), because
// the paper judgement must not depend on the engine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "registry/json_reader.hpp"

namespace anvil::registry {

struct ModelShape {
    std::int64_t hidden_size = 0;        // dim
    std::int64_t intermediate_size = 0;  // the MLP's hidden dim
    std::int64_t layers = 0;
    std::int64_t heads = 0;
    std::int64_t kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t vocab_size = 0;
    std::int64_t max_position = 2048;  // the model's context length: serve's default --max-context
    bool tied_embeddings = false;  // the LM head is the embedding: one matrix, not two
    bool qkv_bias = false;         // Qwen2, or attention_bias
    bool qk_norm = false;          // Qwen3
};

// A shape, or why there is none (one line naming the file and the field).
struct ModelShapeReading {
    std::optional<ModelShape> shape;
    std::string problem;
};

// From a config.json's content; `file` names it in problems.
ModelShapeReading parse_model_shape(const json& config, const std::string& file);
// DIR/config.json, or the metadata of a GGUF file (read on engine/gguf_model.cpp's rules).
ModelShapeReading read_model_shape(const std::filesystem::path& model);

}  // namespace anvil::registry
