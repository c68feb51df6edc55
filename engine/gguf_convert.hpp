// Hugging Face model directory -> GGUF file, as llama.cpp's convert_hf_to_gguf.py writes one for the
// architectures the engine runs: the same metadata keys and tensor names, q and k rows permuted for
// the llama architecture (Llama and Mistral), norms and biases kept in F32, the byte-level BPE
// vocabulary with its merges and pre-tokenizer name. `make-model --out FILE.gguf` and
// `anvil-engine convert` write with it, so the GGUF path is tested on models the project makes.
#pragma once

#include <filesystem>
#include <string>

#include "engine/gguf.hpp"

namespace anvil::engine {

// F32, F16, BF16 or Q8_0 from text ("f32", "f16", "bf16", "q8_0"); throws with the accepted values.
GgmlType parse_gguf_type(const std::string& text);

// Writes `out` (through a temporary file and a rename); returns its size in bytes. Matrices whose
// rows are not whole Q8_0 blocks are written F16, as convert_hf_to_gguf.py does.
size_t convert_to_gguf(const std::filesystem::path& model_dir, const std::filesystem::path& out, GgmlType type);

// Q8_0 as ggml writes it: blocks of 32 values, an f16 scale (largest magnitude / 127) followed by
// 32 int8 values rounded half away from zero. `n` must be a multiple of 32.
void quantize_q8_0(const float* x, size_t n, uint8_t* out);

}  // namespace anvil::engine
