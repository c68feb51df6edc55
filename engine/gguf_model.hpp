// A GGUF file as a model: its metadata read as the model's configuration and tokenizer, and its
// tensor names mapped to the Hugging Face names the rest of the engine uses.
//
// Architectures: GGUF's `llama` (Llama 2/3 and Mistral, whose q and k rows the converter permutes
// for llama.cpp's pairwise rotation: ModelConfig::rope_pairs), `qwen2` and `qwen3`. Tokenizers: the
// `gpt2` (byte-level BPE) vocabulary, its pre-tokenizer named by `tokenizer.ggml.pre`.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "formats/gguf.hpp"
#include "engine/pretokenizer.hpp"
#include "engine/safetensors.hpp"

namespace anvil::engine {

class GgufModel {
public:
    explicit GgufModel(const std::filesystem::path& file);  // maps and validates the whole header

    const formats::GgufImage& image() const { return image_; }
    const std::string& label() const { return label_; }
    const formats::GgufTensor* tensor(std::string_view name) const;

    // Throws std::runtime_error naming the file and the metadata key for anything missing or
    // unsupported.
    ModelConfig config() const;
    // The vocabulary as the documents a Hugging Face model would carry: tokenizer.json and
    // tokenizer_config.json (chat template, bos/eos tokens), for Tokenizer's constructor.
    std::pair<nlohmann::json, nlohmann::json> tokenizer_documents() const;

private:
    MappedFile file_;
    std::string label_;
    formats::GgufImage image_;
};

// What GgufModel's members do, on a parsed image (the fuzz target calls these).
const formats::GgufTensor* find_tensor(const formats::GgufImage& image, std::string_view name);
ModelConfig gguf_config(const formats::GgufImage& image, const std::string& label);
std::pair<nlohmann::json, nlohmann::json> gguf_tokenizer_documents(const formats::GgufImage& image, const std::string& label);

// The Hugging Face name of a GGUF tensor ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"),
// or nothing for a tensor the engine has no use for.
std::optional<std::string> hf_tensor_name(std::string_view gguf_name);
// And back: the GGUF name of a Hugging Face tensor the engine reads.
std::optional<std::string> gguf_tensor_name(std::string_view hf_name);

// The GGUF split names (`tokenizer.ggml.pre`) of the engine's pre-tokenizer patterns.
const char* gguf_pre_tokenizer_name(SplitPattern pattern);

}  // namespace anvil::engine
