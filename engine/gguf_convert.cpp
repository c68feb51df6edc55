#include "engine/gguf_convert.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "engine/gguf_model.hpp"
#include "engine/gguf_sentencepiece.hpp"
#include "engine/json_file.hpp"
#include "engine/safetensors.hpp"
#include "engine/tokenizer.hpp"
#include "engine/weights.hpp"
#include "kernels/convert.hpp"
#include "kernels/ggml_blocks.hpp"

namespace anvil::engine {

using nlohmann::json;

namespace {

// llama.cpp's llama_ftype.
uint32_t file_type(GgufFileType type) {
    switch (type) {
        case GgufFileType::F32: return 0;
        case GgufFileType::F16: return 1;
        case GgufFileType::Q4_0: return 2;
        case GgufFileType::Q8_0: return 7;
        case GgufFileType::Q4_K_M: return 15;
        case GgufFileType::Q6_K: return 18;
        case GgufFileType::BF16: return 32;
    }
    throw std::logic_error("convert_to_gguf: unsupported type");
}

// Which matrix of the model a tensor is, for the mixed file types.
enum class Role { Embedding, Output, AttnV, FfnDown, Other };

// llama-quantize's use_more_bits: the first and last eighth of the layers, and every third between.
bool more_bits(int layer, int layers) {
    return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

int block_values(formats::GgmlType type) {
    switch (type) {
        case formats::GgmlType::Q8_0:
        case formats::GgmlType::Q5_0:
        case formats::GgmlType::Q4_0: return 32;
        case formats::GgmlType::Q4_K:
        case formats::GgmlType::Q6_K: return 256;
        default: return 1;
    }
}

formats::GgmlType matrix_type(GgufFileType file, Role role, int layer, int layers, int cols) {
    formats::GgmlType type = formats::GgmlType::F32;
    switch (file) {
        case GgufFileType::F32: return formats::GgmlType::F32;
        case GgufFileType::F16: return formats::GgmlType::F16;
        case GgufFileType::BF16: return formats::GgmlType::BF16;
        case GgufFileType::Q8_0: type = formats::GgmlType::Q8_0; break;
        case GgufFileType::Q6_K: type = formats::GgmlType::Q6_K; break;
        case GgufFileType::Q4_0: type = role == Role::Output ? formats::GgmlType::Q6_K : formats::GgmlType::Q4_0; break;
        case GgufFileType::Q4_K_M:
            type = role == Role::Output || ((role == Role::AttnV || role == Role::FfnDown) && more_bits(layer, layers))
                       ? formats::GgmlType::Q6_K
                       : formats::GgmlType::Q4_K;
            break;
    }
    if (cols % block_values(type) != 0) type = type == formats::GgmlType::Q6_K ? formats::GgmlType::Q8_0 : type == formats::GgmlType::Q4_K ? formats::GgmlType::Q5_0 : type;
    if (cols % block_values(type) != 0) type = formats::GgmlType::F16;
    return type;
}

const char* gguf_architecture(Architecture arch) {
    switch (arch) {
        case Architecture::Llama:
        case Architecture::Mistral: return "llama";  // as convert_hf_to_gguf.py maps MistralForCausalLM
        case Architecture::Qwen2: return "qwen2";
        case Architecture::Qwen3: return "qwen3";
    }
    return "llama";
}

// The row order convert_hf_to_gguf.py's LlamaModel.permute gives q and k: within each head, the
// rows of the two halves interleaved, so that llama.cpp's pairwise rotation equals Hugging Face's.
std::vector<int> permuted_rows(int rows, int heads) {
    const int head_dim = rows / heads;
    const int half = head_dim / 2;
    std::vector<int> from(static_cast<size_t>(rows));
    for (int h = 0; h < heads; ++h)
        for (int j = 0; j < half; ++j)
            for (int s = 0; s < 2; ++s) from[size_t(h * head_dim + 2 * j + s)] = h * head_dim + s * half + j;
    return from;
}

std::vector<uint8_t> encode_rows(const TensorInfo& t, int rows, int cols, formats::GgmlType type, const std::vector<int>& order) {
    const formats::GgmlTypeInfo* info = formats::ggml_type_info(uint32_t(type));
    const size_t row_size = size_t(cols) / info->block * info->block_bytes;
    std::vector<uint8_t> out(size_t(rows) * row_size);
    // Rows apart: the K-quants' scale searches are most of a Q4_K_M conversion's time.
#pragma omp parallel for schedule(dynamic, 16)
    for (int r = 0; r < rows; ++r) {
        thread_local std::vector<float> row;
        row.resize(size_t(cols));
        stored_row_to_f32(t, order.empty() ? r : order[size_t(r)], cols, row.data());
        uint8_t* dst = out.data() + size_t(r) * row_size;
        switch (type) {
            case formats::GgmlType::F32: std::memcpy(dst, row.data(), row_size); break;
            case formats::GgmlType::F16:
                for (int k = 0; k < cols; ++k) {
                    const uint16_t h = kernels::f32_to_f16(row[size_t(k)]);
                    std::memcpy(dst + 2 * k, &h, 2);
                }
                break;
            case formats::GgmlType::BF16:
                for (int k = 0; k < cols; ++k) {
                    const uint16_t b = kernels::f32_to_bf16(row[size_t(k)]);
                    std::memcpy(dst + 2 * k, &b, 2);
                }
                break;
            case formats::GgmlType::Q8_0: quantize_q8_0(row.data(), size_t(cols), dst); break;
            case formats::GgmlType::Q4_0: kernels::quantize_q4_0(row.data(), size_t(cols), dst); break;
            case formats::GgmlType::Q5_0: kernels::quantize_q5_0(row.data(), size_t(cols), dst); break;
            case formats::GgmlType::Q4_K: kernels::quantize_q4_k(row.data(), size_t(cols), dst); break;
            case formats::GgmlType::Q6_K: kernels::quantize_q6_k(row.data(), size_t(cols), dst); break;
            default: break;  // matrix_type chooses none other
        }
    }
    return out;
}

}  // namespace

void quantize_q8_0(const float* x, size_t n, uint8_t* out) {
    for (size_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t half = kernels::f32_to_f16(d);
        std::memcpy(out, &half, 2);
        for (int i = 0; i < 32; ++i) out[2 + i] = uint8_t(int8_t(std::lround(x[i] * id)));
    }
}

GgufFileType parse_gguf_type(const std::string& text) {
    for (GgufFileType type : {GgufFileType::F32, GgufFileType::F16, GgufFileType::BF16, GgufFileType::Q8_0, GgufFileType::Q4_0,
                              GgufFileType::Q4_K_M, GgufFileType::Q6_K})
        if (text == gguf_file_type_name(type)) return type;
    throw std::runtime_error("GGUF type " + text + ": expected f32, f16, bf16, q8_0, q4_0, q4_k_m or q6_k");
}

const char* gguf_file_type_name(GgufFileType type) {
    switch (type) {
        case GgufFileType::F32: return "f32";
        case GgufFileType::F16: return "f16";
        case GgufFileType::BF16: return "bf16";
        case GgufFileType::Q8_0: return "q8_0";
        case GgufFileType::Q4_0: return "q4_0";
        case GgufFileType::Q4_K_M: return "q4_k_m";
        case GgufFileType::Q6_K: return "q6_k";
    }
    return "?";
}

namespace {

// Conversion reads a Hugging Face directory; a file given instead is refused by what it is.
void refuse_a_file(const std::filesystem::path& model) {
    if (formats::is_gguf_file(model)) throw std::runtime_error(model.string() + ": already a GGUF file");
    if (formats::is_model_file(model))
        throw std::runtime_error(model.string() + ": a file; convert reads a Hugging Face model directory (config.json, tokenizer.json, *.safetensors)");
}

// The tokenizer as GGUF metadata: the `gpt2` vocabulary for a byte-level one, `llama` for a
// SentencePiece-style one, as convert_hf_to_gguf.py writes them.
void write_vocabulary(formats::GgufWriter& w, const std::filesystem::path& model_dir, const Tokenizer& tokenizer, int vocab_size,
                      int bos_id, const std::vector<int>& eos_ids) {
    const json doc = read_json_file(model_dir / "tokenizer.json");
    if (tokenizer.form() == VocabForm::SentencePiece) {
        // As convert_hf_to_gguf.py writes a SentencePiece model: the `llama` vocabulary.
        const SentencePieceVocab v = sentencepiece_vocab_from_json(doc, vocab_size, tokenizer.adds_space_prefix(),
                                                                   (model_dir / "tokenizer.json").string());
        w.set_string("tokenizer.ggml.model", "llama");
        w.set_strings("tokenizer.ggml.tokens", v.tokens);
        w.set_f32s("tokenizer.ggml.scores", v.scores);
        w.set_i32s("tokenizer.ggml.token_type", v.types);
        w.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
        if (v.unknown) w.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(*v.unknown));
    } else {
        // The vocabulary by id, in its byte-level form; ids nothing names are padding, as the converter pads.
        std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
        std::vector<int32_t> types(static_cast<size_t>(vocab_size), kTokenUnused);
        for (const auto& [text, id] : doc["model"]["vocab"].items()) {
            const int64_t i = id.get<int64_t>();
            if (i < 0 || i >= vocab_size) throw std::runtime_error(model_dir.string() + ": tokenizer.json's vocab holds id " + std::to_string(i) + " outside vocab_size");
            tokens[size_t(i)] = text;
            types[size_t(i)] = kTokenNormal;
        }
        for (const auto& added : doc.value("added_tokens", json::array())) {
            const int64_t i = added["id"].get<int64_t>();
            if (i < 0 || i >= vocab_size) throw std::runtime_error(model_dir.string() + ": an added token's id is outside vocab_size");
            tokens[size_t(i)] = added["content"].get<std::string>();
            types[size_t(i)] = added.value("special", false) ? kTokenControl : kTokenUserDefined;
        }
        for (size_t i = 0; i < tokens.size(); ++i)
            if (types[i] == kTokenUnused) tokens[i] = "[PAD" + std::to_string(i) + "]";
        std::vector<std::string> merges;
        for (const auto& m : doc["model"].value("merges", json::array()))
            merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_string("tokenizer.ggml.pre", gguf_pre_tokenizer_name(tokenizer.split_pattern()));
        w.set_strings("tokenizer.ggml.tokens", tokens);
        w.set_i32s("tokenizer.ggml.token_type", types);
        w.set_strings("tokenizer.ggml.merges", merges);
    }
    const auto bos = tokenizer.token_id(tokenizer.bos_token());
    if (bos_id >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(bos_id));
    else if (bos && !tokenizer.bos_token().empty()) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(*bos));
    if (!eos_ids.empty()) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(eos_ids[0]));
    if (eos_ids.size() > 1) w.set_u32("tokenizer.ggml.eot_token_id", uint32_t(eos_ids[1]));
    // BOS is added as the engine adds it: when the tokenizer's post-processor (or add_bos_token) does.
    const auto prefix = tokenizer.encode("", true);
    w.set_bool("tokenizer.ggml.add_bos_token", !prefix.empty());
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    if (!tokenizer.chat_template().empty()) w.set_string("tokenizer.chat_template", tokenizer.chat_template());

}

}  // namespace

size_t convert_vocabulary_to_gguf(const std::filesystem::path& model_dir, const std::filesystem::path& out) {
    refuse_a_file(model_dir);
    const Tokenizer tokenizer = Tokenizer::load(model_dir);
    std::vector<int> eos_ids;
    if (auto eos = tokenizer.token_id(tokenizer.eos_token()); eos && !tokenizer.eos_token().empty()) eos_ids.push_back(*eos);
    formats::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", std::filesystem::absolute(model_dir).lexically_normal().filename().string());
    w.set_u32("llama.vocab_size", uint32_t(tokenizer.vocab_size()));
    write_vocabulary(w, model_dir, tokenizer, tokenizer.vocab_size(), -1, eos_ids);
    return w.write(out);
}

size_t convert_to_gguf(const std::filesystem::path& model_dir, const std::filesystem::path& out, GgufFileType type) {
    refuse_a_file(model_dir);
    const ModelConfig c = load_config(model_dir);
    const Tokenizer tokenizer = Tokenizer::load(model_dir);
    const json doc = read_json_file(model_dir / "tokenizer.json");
    const std::string arch = gguf_architecture(c.arch);
    const std::string a = arch + ".";

    formats::GgufWriter w;
    w.set_string("general.architecture", arch);
    w.set_string("general.name", std::filesystem::absolute(model_dir).lexically_normal().filename().string());
    w.set_u32("general.file_type", file_type(type));
    w.set_u32("general.quantization_version", 2);
    w.set_u32(a + "context_length", uint32_t(c.max_position));
    w.set_u32(a + "embedding_length", uint32_t(c.dim));
    w.set_u32(a + "feed_forward_length", uint32_t(c.hidden_dim));
    w.set_u32(a + "block_count", uint32_t(c.n_layers));
    w.set_u32(a + "attention.head_count", uint32_t(c.n_heads));
    w.set_u32(a + "attention.head_count_kv", uint32_t(c.n_kv_heads));
    w.set_f32(a + "rope.freq_base", float(c.rope_theta));
    w.set_f32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
    w.set_u32(a + "rope.dimension_count", uint32_t(c.head_dim));
    if (c.head_dim != c.dim / c.n_heads) {
        w.set_u32(a + "attention.key_length", uint32_t(c.head_dim));
        w.set_u32(a + "attention.value_length", uint32_t(c.head_dim));
    }
    w.set_u32(a + "vocab_size", uint32_t(c.vocab_size));
    // llama.cpp reads no window for the llama architecture; the engine does, so a Mistral model
    // keeps its own.
    if (c.sliding_window > 0) w.set_u32(a + "attention.sliding_window", uint32_t(c.sliding_window));
    if (c.rope_scaling.kind == RopeScaling::Kind::Linear) {
        w.set_string(a + "rope.scaling.type", "linear");
        w.set_f32(a + "rope.scaling.factor", float(c.rope_scaling.factor));
    }

    write_vocabulary(w, model_dir, tokenizer, c.vocab_size, c.bos_token_id, c.eos_token_ids);

    const TensorStore store(model_dir);
    auto vector = [&](const std::string& name, int n, const std::vector<int>& order = {}) {
        const TensorInfo& t = store.get(name, {n});
        std::vector<float> values(static_cast<size_t>(n));
        stored_row_to_f32(t, 0, n, values.data());
        std::vector<uint8_t> bytes(size_t(n) * 4);
        for (int i = 0; i < n; ++i) std::memcpy(bytes.data() + 4 * i, &values[size_t(order.empty() ? i : order[size_t(i)])], 4);
        w.add_tensor(*gguf_tensor_name(name), formats::GgmlType::F32, {n}, std::move(bytes));
    };
    auto matrix = [&](const std::string& name, int rows, int cols, Role role, int layer = 0, const std::vector<int>& order = {}) {
        const TensorInfo& t = store.get(name, {rows, cols});
        const formats::GgmlType as = matrix_type(type, role, layer, c.n_layers, cols);
        w.add_tensor(*gguf_tensor_name(name), as, {cols, rows}, encode_rows(t, rows, cols, as, order));
    };

    if (c.rope_scaling.kind == RopeScaling::Kind::Llama3) {
        // convert_hf_to_gguf.py writes llama3 scaling as one factor per frequency.
        ModelConfig plain = c;
        plain.rope_scaling = {};
        const auto scaled = rope_inverse_frequencies(c);
        const auto unscaled = rope_inverse_frequencies(plain);
        std::vector<uint8_t> bytes;
        for (size_t i = 0; i < scaled.size(); ++i) {
            const float factor = float(unscaled[i] / scaled[i]);
            bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&factor), reinterpret_cast<const uint8_t*>(&factor) + 4);
        }
        w.add_tensor("rope_freqs.weight", formats::GgmlType::F32, {c.head_dim / 2}, std::move(bytes));
    }
    const bool permute = c.arch == Architecture::Llama || c.arch == Architecture::Mistral;
    const std::vector<int> q_order = permute ? permuted_rows(c.q_dim(), c.n_heads) : std::vector<int>{};
    const std::vector<int> k_order = permute ? permuted_rows(c.kv_dim(), c.n_kv_heads) : std::vector<int>{};
    matrix("model.embed_tokens.weight", c.vocab_size, c.dim, c.tie_embeddings ? Role::Output : Role::Embedding);
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        vector(p + "input_layernorm.weight", c.dim);
        matrix(p + "self_attn.q_proj.weight", c.q_dim(), c.dim, Role::Other, i, q_order);
        matrix(p + "self_attn.k_proj.weight", c.kv_dim(), c.dim, Role::Other, i, k_order);
        matrix(p + "self_attn.v_proj.weight", c.kv_dim(), c.dim, Role::AttnV, i);
        matrix(p + "self_attn.o_proj.weight", c.dim, c.q_dim(), Role::Other, i);
        if (c.qkv_bias) {
            vector(p + "self_attn.q_proj.bias", c.q_dim(), q_order);
            vector(p + "self_attn.k_proj.bias", c.kv_dim(), k_order);
            vector(p + "self_attn.v_proj.bias", c.kv_dim());
        }
        if (c.qk_norm) {
            vector(p + "self_attn.q_norm.weight", c.head_dim);
            vector(p + "self_attn.k_norm.weight", c.head_dim);
        }
        vector(p + "post_attention_layernorm.weight", c.dim);
        matrix(p + "mlp.gate_proj.weight", c.hidden_dim, c.dim, Role::Other, i);
        matrix(p + "mlp.up_proj.weight", c.hidden_dim, c.dim, Role::Other, i);
        matrix(p + "mlp.down_proj.weight", c.dim, c.hidden_dim, Role::FfnDown, i);
    }
    vector("model.norm.weight", c.dim);
    if (!c.tie_embeddings) matrix("lm_head.weight", c.vocab_size, c.dim, Role::Output);
    return w.write(out);
}

}  // namespace anvil::engine
