// The model's shape and numerics, read from a Hugging Face config.json (and generation_config.json).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace anvil::engine {

enum class Architecture { Llama, Qwen2, Qwen3, Mistral };
const char* architecture_name(Architecture arch);

struct RopeScaling {
    enum class Kind { None, Linear, Llama3 } kind = Kind::None;
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int original_max_position = 8192;
};

struct ModelConfig {
    Architecture arch = Architecture::Llama;
    int dim = 0;             // hidden_size
    int hidden_dim = 0;      // intermediate_size
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;        // explicit (Qwen3) or dim / n_heads
    int vocab_size = 0;
    int max_position = 0;    // max_position_embeddings
    float norm_eps = 1e-5f;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    // GGUF's rope_freqs.weight (how convert_hf_to_gguf writes llama3 scaling): each inverse
    // frequency is divided by its factor. Empty: none.
    std::vector<double> rope_freq_factors;
    // q and k rows as GGUF's llama architecture stores them: rotated in adjacent pairs
    // (kernels::rope_pairs) instead of halves.
    bool rope_pairs = false;
    bool tie_embeddings = false;
    bool qkv_bias = false;   // Qwen2 always; Llama/Mistral when attention_bias is true
    bool qk_norm = false;    // Qwen3
    int sliding_window = 0;  // 0: attend to the whole context
    std::vector<int> eos_token_ids;
    int bos_token_id = -1;

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads DIR/config.json and, when present, DIR/generation_config.json (its eos ids win); or, when
// `model` is a GGUF file, its metadata (gguf_model.hpp). Throws std::runtime_error naming the file
// and the field for anything missing or unsupported.
ModelConfig load_config(const std::filesystem::path& model);

// The inverse frequencies of the rotary embedding, [head_dim / 2], with the configured scaling.
std::vector<double> rope_inverse_frequencies(const ModelConfig& config);

}  // namespace anvil::engine
