// The model's tensors in the format the kernels multiply with: kept as stored when the stored format
// is the one asked for, converted once at load otherwise. What decode streams every token is held
// on huge pages (copied there when kept as stored); an untied embedding, read a row a token, and
// the norms are read from the files' mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/config.hpp"
#include "engine/safetensors.hpp"
#include "kernels/streamed_memory.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::engine {

// `Stored` keeps f32, bf16 and GGUF's Q8_0, Q4_0, Q4_K and Q6_K as they are (Q8_0 as q8, and Q5_0 too:
// its 5-bit values are int8 exactly) and widens f16 to f32.
enum class WeightFormat { Stored, F32, BF16, Q8 };
WeightFormat parse_weight_format(const std::string& text);  // throws with the accepted values
const char* weight_format_name(WeightFormat format);

// Where the runner keeps the weights. On the CPU, q8 and GGUF blocks are packed for the kernel
// level that multiplies them, and what decode streams is copied onto huge pages; a GPU runner
// uploads them, so it takes them row-major and straight from the file's mapping where it can.
enum class WeightHome { Cpu, Device };

struct LayerWeights {
    const float* attn_norm = nullptr;  // [dim]
    kernels::WeightMatrix wq;          // [q_dim][dim]
    kernels::WeightMatrix wk;          // [kv_dim][dim]
    kernels::WeightMatrix wv;          // [kv_dim][dim]
    kernels::WeightMatrix wo;          // [dim][q_dim]
    const float* bq = nullptr;         // [q_dim], with qkv_bias
    const float* bk = nullptr;         // [kv_dim]
    const float* bv = nullptr;         // [kv_dim]
    const float* q_norm = nullptr;     // [head_dim], with qk_norm
    const float* k_norm = nullptr;     // [head_dim]
    const float* ffn_norm = nullptr;   // [dim]
    kernels::WeightMatrix w_gate;      // [hidden_dim][dim]
    kernels::WeightMatrix w_up;        // [hidden_dim][dim]
    kernels::WeightMatrix w_down;      // [dim][hidden_dim]
};

class ModelWeights {
public:
    ModelWeights(const ModelConfig& config, const std::filesystem::path& model_dir, WeightFormat format,
                 WeightHome home = WeightHome::Cpu);
    ModelWeights(const ModelWeights&) = delete;
    ModelWeights& operator=(const ModelWeights&) = delete;

    kernels::WeightMatrix embedding;  // [vocab][dim]
    std::vector<LayerWeights> layers;
    const float* final_norm = nullptr;  // [dim]
    kernels::WeightMatrix lm_head;      // [vocab][dim]; the embedding itself when tied

    // Weight bytes one decoded token reads: every matrix once, the embedding row aside.
    size_t bytes_per_token() const { return bytes_per_token_; }
    size_t resident_bytes() const { return owned_.used_bytes(); }
    // The matrices are the files' own f32, bf16 or f16 values, unconverted: any format that keeps
    // them so holds the same tensors.
    bool kept_as_stored() const { return kept_as_stored_; }

private:
    // `streamed`: decode reads all of it every token (every matrix but an untied embedding).
    kernels::WeightMatrix matrix(const std::string& name, int rows, int cols, WeightFormat format, bool streamed = true);
    const float* vector(const std::string& name, int n);
    void* allocate(size_t bytes);

    WeightHome home_ = WeightHome::Cpu;
    std::unique_ptr<TensorStore> store_;
    kernels::StreamedArena owned_;  // what load converted, on huge pages: decode streams it
    size_t bytes_per_token_ = 0;
    bool kept_as_stored_ = false;
};

size_t matrix_bytes(const kernels::WeightMatrix& m);

// Row r of a stored tensor ([rows][cols], or a vector as one row) widened to f32.
void stored_row_to_f32(const TensorInfo& t, int64_t r, int cols, float* out);

}  // namespace anvil::engine
