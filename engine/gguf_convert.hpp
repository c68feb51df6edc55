// Hugging Face model directory -> GGUF file, as llama.cpp's convert_hf_to_gguf.py writes one for the
// architectures the engine runs: the same metadata keys and tensor names, q and k rows permuted for
// the llama architecture (Llama and Mistral), norms and biases kept in F32, the byte-level BPE
// vocabulary with its merges and pre-tokenizer name. `make-model --out FILE.gguf` and
// `anvil-engine convert` write with it, so the GGUF path is tested on models the project makes.
#pragma once

#include <filesystem>
#include <string>

#include "formats/gguf.hpp"

namespace anvil::engine {

// What a written file's matrices are: one type for all, or a mix as llama-quantize writes it. Norms
// and biases stay F32 in every one.
//   q4_0    Q4_0, the output matrix Q6_K (llama-quantize's MOSTLY_Q4_0)
//   q4_k_m  Q4_K; the output matrix, and attn_v and ffn_down in the first and last eighth of the
//           layers and every third layer between, Q6_K (MOSTLY_Q4_K_M). With tied embeddings the
//           embedding is the output matrix.
//   q6_k    Q6_K throughout (MOSTLY_Q6_K)
// A matrix whose rows are not whole blocks falls back as llama-quantize's does: Q6_K to Q8_0, Q4_K
// to Q5_0, and Q8_0 or Q4_0 to F16.
enum class GgufFileType { F32, F16, BF16, Q8_0, Q4_0, Q4_K_M, Q6_K };
// From text ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q6_k"); throws with the accepted values.
GgufFileType parse_gguf_type(const std::string& text);
const char* gguf_file_type_name(GgufFileType type);

// Writes `out` (through a temporary file and a rename); returns its size in bytes.
size_t convert_to_gguf(const std::filesystem::path& model_dir, const std::filesystem::path& out, GgufFileType type);
// The tokenizer alone (tokenizer.json and tokenizer_config.json; no weights), as llama.cpp's
// vocab-only files are: for checking a vocabulary's GGUF form without the model.
size_t convert_vocabulary_to_gguf(const std::filesystem::path& model_dir, const std::filesystem::path& out);

// Q8_0 as ggml writes it: blocks of 32 values, an f16 scale (largest magnitude / 127) followed by
// 32 int8 values rounded half away from zero. `n` must be a multiple of 32.
void quantize_q8_0(const float* x, size_t n, uint8_t* out);

}  // namespace anvil::engine
