#include "engine/gguf_model.hpp"

#include <array>
#include <cstring>
#include <stdexcept>

#include "engine/gguf_sentencepiece.hpp"

namespace anvil::engine {

using nlohmann::json;

namespace {

// The per-layer tensors, GGUF suffix after "blk.N." and Hugging Face suffix after "model.layers.N.".
constexpr std::array<std::pair<std::string_view, std::string_view>, 17> kLayerTensors{{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_down.bias", "mlp.down_proj.bias"},
}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kModelTensors{{
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
}};

// "N." at the start of `rest`: the layer number and what follows.
std::optional<std::pair<std::string, std::string_view>> layer_prefix(std::string_view rest) {
    size_t digits = 0;
    while (digits < rest.size() && digits < 6 && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    if (digits == 0 || digits >= rest.size() || rest[digits] != '.') return std::nullopt;
    return std::make_pair(std::string(rest.substr(0, digits)), rest.substr(digits + 1));
}

// Reads metadata keys with messages naming the file and the key.
struct Meta {
    const json& m;
    const std::string& label;

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw std::runtime_error(label + ": metadata " + key + " " + what);
    }
    bool has(const std::string& key) const { return m.contains(key); }
    uint64_t whole(const std::string& key) const {
        if (!has(key)) fail(key, "is missing");
        const json& v = m[key];
        if (v.is_number_unsigned()) return v.get<uint64_t>();
        if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
        fail(key, "is not a non-negative integer");
    }
    int positive(const std::string& key) const {
        const uint64_t v = whole(key);
        if (v == 0 || v > (1u << 30)) fail(key, "is " + std::to_string(v) + ": expected a positive size");
        return int(v);
    }
    int positive_or(const std::string& key, int fallback) const { return has(key) ? positive(key) : fallback; }
    double number_or(const std::string& key, double fallback) const {
        if (!has(key)) return fallback;
        if (!m[key].is_number()) fail(key, "is not a number");
        return m[key].get<double>();
    }
    std::string text_or(const std::string& key, const std::string& fallback) const {
        if (!has(key)) return fallback;
        if (!m[key].is_string()) fail(key, "is not a string");
        return m[key].get<std::string>();
    }
    bool flag_or(const std::string& key, bool fallback) const {
        if (!has(key)) return fallback;
        if (!m[key].is_boolean()) fail(key, "is not a bool");
        return m[key].get<bool>();
    }
};

SplitPattern pattern_of_pre(const Meta& meta) {
    const std::string pre = meta.text_or("tokenizer.ggml.pre", "gpt-2");
    if (pre == "gpt-2") return SplitPattern::Gpt2;
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return SplitPattern::Llama3;
    if (pre == "qwen2") return SplitPattern::Qwen2;
    meta.fail("tokenizer.ggml.pre", "is \"" + pre + "\": anvil-engine splits text as gpt-2, llama-bpe (Llama 3) and qwen2 do");
}


}  // namespace

std::optional<std::string> hf_tensor_name(std::string_view name) {
    for (const auto& [gguf, hf] : kModelTensors)
        if (name == gguf) return std::string(hf);
    if (!name.starts_with("blk.")) return std::nullopt;
    const auto layer = layer_prefix(name.substr(4));
    if (!layer) return std::nullopt;
    for (const auto& [gguf, hf] : kLayerTensors)
        if (layer->second == gguf) return "model.layers." + layer->first + "." + std::string(hf);
    return std::nullopt;
}

std::optional<std::string> gguf_tensor_name(std::string_view name) {
    for (const auto& [gguf, hf] : kModelTensors)
        if (name == hf) return std::string(gguf);
    constexpr std::string_view kLayers = "model.layers.";
    if (!name.starts_with(kLayers)) return std::nullopt;
    const auto layer = layer_prefix(name.substr(kLayers.size()));
    if (!layer) return std::nullopt;
    for (const auto& [gguf, hf] : kLayerTensors)
        if (layer->second == hf) return "blk." + layer->first + "." + std::string(gguf);
    return std::nullopt;
}

const char* gguf_pre_tokenizer_name(SplitPattern pattern) {
    switch (pattern) {
        case SplitPattern::Gpt2: return "gpt-2";
        case SplitPattern::Llama3: return "llama-bpe";
        case SplitPattern::Qwen2: return "qwen2";
    }
    return "gpt-2";
}

GgufModel::GgufModel(const std::filesystem::path& file)
    : file_(file), label_(file.string()), image_(formats::parse_gguf(file_.data(), file_.size(), label_)) {}

const formats::GgufTensor* GgufModel::tensor(std::string_view name) const { return find_tensor(image_, name); }
ModelConfig GgufModel::config() const { return gguf_config(image_, label_); }
std::pair<json, json> GgufModel::tokenizer_documents() const { return gguf_tokenizer_documents(image_, label_); }

const formats::GgufTensor* find_tensor(const formats::GgufImage& image, std::string_view name) {
    for (const auto& t : image.tensors)
        if (t.name == name) return &t;
    return nullptr;
}

namespace {

// The metadata's counts against the tensors the file holds, before anything is sized by them: a
// block_count of 10^8 would have the loader allocate a layer table of gigabytes. Each block's
// tensors must be there (the last block's first one is looked up), and the first block's
// attention and MLP matrices must have the rows the head counts and widths say.
void check_counts_against_tensors(const ModelConfig& c, const Meta& meta, const formats::GgufImage& image, const std::string& a) {
    // A block holds at least its norms and seven matrices.
    if (uint64_t(c.n_layers) * 9 > image.tensors.size())
        meta.fail(a + "block_count", "is " + std::to_string(c.n_layers) + " but the file holds " + std::to_string(image.tensors.size()) +
                                         " tensors, too few for that many blocks");
    const std::string last = "blk." + std::to_string(c.n_layers - 1) + ".attn_norm.weight";
    if (!find_tensor(image, last)) meta.fail(a + "block_count", "is " + std::to_string(c.n_layers) + " but the file has no tensor " + last);
    auto rows = [&](const char* name, int64_t want, const std::string& key, const char* says) {
        const formats::GgufTensor* t = find_tensor(image, name);
        if (!t) throw std::runtime_error(meta.label + ": tensor " + name + " is missing");
        if (t->ne.size() != 2 || t->ne[1] != want)
            meta.fail(key, std::string(says) + " " + std::to_string(want) + " rows of " + name + ", which has " +
                               (t->ne.size() == 2 ? std::to_string(t->ne[1]) : std::string("not two dimensions")));
    };
    rows("blk.0.attn_q.weight", int64_t(c.n_heads) * c.head_dim, a + "attention.head_count", "(with the head length) says");
    rows("blk.0.attn_k.weight", int64_t(c.n_kv_heads) * c.head_dim, a + "attention.head_count_kv", "(with the head length) says");
    rows("blk.0.ffn_up.weight", c.hidden_dim, a + "feed_forward_length", "says");
}

}  // namespace

ModelConfig gguf_config(const formats::GgufImage& image, const std::string& label) {
    const Meta meta{image.metadata, label};
    auto tensor = [&](std::string_view name) { return find_tensor(image, name); };
    ModelConfig c;
    const std::string arch = meta.text_or("general.architecture", "");
    if (arch.empty()) meta.fail("general.architecture", "is missing");
    if (arch == "llama") c.arch = Architecture::Llama;
    else if (arch == "qwen2") c.arch = Architecture::Qwen2;
    else if (arch == "qwen3") c.arch = Architecture::Qwen3;
    else meta.fail("general.architecture", "is \"" + arch + "\"; anvil-engine runs llama (Llama 2/3, Mistral), qwen2 and qwen3");
    // convert_hf_to_gguf permutes the llama architecture's q and k rows for llama.cpp's pairwise
    // rotation; qwen2 and qwen3 keep Hugging Face's halves (llama.cpp's "neox" rotation).
    c.rope_pairs = c.arch == Architecture::Llama;
    const std::string a = arch + ".";
    if (meta.has(a + "expert_count") && meta.whole(a + "expert_count") > 0)
        meta.fail(a + "expert_count", "is set: a mixture of experts, which anvil-engine does not run");

    c.dim = meta.positive(a + "embedding_length");
    c.hidden_dim = meta.positive(a + "feed_forward_length");
    c.n_layers = meta.positive(a + "block_count");
    c.n_heads = meta.positive(a + "attention.head_count");
    c.n_kv_heads = meta.positive_or(a + "attention.head_count_kv", c.n_heads);
    if (c.n_heads % c.n_kv_heads != 0) meta.fail(a + "attention.head_count_kv", "must divide attention.head_count");
    if (meta.has(a + "attention.key_length")) {
        c.head_dim = meta.positive(a + "attention.key_length");
    } else {
        if (c.dim % c.n_heads != 0) meta.fail(a + "embedding_length", "is not a multiple of attention.head_count");
        c.head_dim = c.dim / c.n_heads;
    }
    if (meta.positive_or(a + "attention.value_length", c.head_dim) != c.head_dim)
        meta.fail(a + "attention.value_length", "differs from the key length; anvil-engine needs them equal");
    if (c.head_dim % 2 != 0) meta.fail(a + "attention.key_length", "must be even for the rotary embedding");
    if (meta.positive_or(a + "rope.dimension_count", c.head_dim) != c.head_dim)
        meta.fail(a + "rope.dimension_count", "rotates part of each head; anvil-engine rotates whole heads only");
    c.max_position = meta.positive(a + "context_length");
    c.norm_eps = float(meta.number_or(a + "attention.layer_norm_rms_epsilon", 1e-5));
    if (!(c.norm_eps > 0)) meta.fail(a + "attention.layer_norm_rms_epsilon", "must be positive");
    c.rope_theta = meta.number_or(a + "rope.freq_base", 10000.0);
    if (!(c.rope_theta > 1)) meta.fail(a + "rope.freq_base", "must exceed 1");
    c.sliding_window = meta.has(a + "attention.sliding_window") ? meta.positive(a + "attention.sliding_window") : 0;

    const std::string scaling = meta.text_or(a + "rope.scaling.type", "none");
    if (scaling == "linear") {
        c.rope_scaling.kind = RopeScaling::Kind::Linear;
        c.rope_scaling.factor = meta.number_or(a + "rope.scaling.factor", 1.0);
        if (!(c.rope_scaling.factor > 0)) meta.fail(a + "rope.scaling.factor", "must be positive");
    } else if (scaling != "none") {
        meta.fail(a + "rope.scaling.type", "is \"" + scaling + "\"; anvil-engine supports linear scaling and rope_freqs.weight");
    }
    if (const formats::GgufTensor* f = tensor("rope_freqs.weight")) {
        if (f->type != uint32_t(formats::GgmlType::F32) || f->ne.size() != 1 || f->ne[0] != c.head_dim / 2)
            throw std::runtime_error(label + ": tensor rope_freqs.weight must be F32 [" + std::to_string(c.head_dim / 2) + "]");
        for (int i = 0; i < c.head_dim / 2; ++i) {
            float v;
            std::memcpy(&v, f->data + 4 * i, 4);
            if (!(v > 0)) throw std::runtime_error(label + ": tensor rope_freqs.weight holds a factor that is not positive");
            c.rope_freq_factors.push_back(v);
        }
    }

    const formats::GgufTensor* embedding = tensor("token_embd.weight");
    if (!embedding || embedding->ne.size() != 2)
        throw std::runtime_error(label + ": tensor token_embd.weight is missing or not a matrix");
    if (embedding->ne[1] > (int64_t(1) << 30)) throw std::runtime_error(label + ": token_embd.weight is implausibly large");
    c.vocab_size = int(embedding->ne[1]);
    if (embedding->ne[0] != c.dim)
        throw std::runtime_error(label + ": tensor token_embd.weight has rows of " + std::to_string(embedding->ne[0]) +
                                 ", expected " + a + "embedding_length " + std::to_string(c.dim));
    c.tie_embeddings = tensor("output.weight") == nullptr;
    c.qkv_bias = tensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm = tensor("blk.0.attn_q_norm.weight") != nullptr;
    for (const char* unsupported : {"blk.0.attn_output.bias", "blk.0.ffn_gate.bias", "blk.0.ffn_down.bias"})
        if (tensor(unsupported)) throw std::runtime_error(label + ": tensor " + unsupported + ": anvil-engine runs no output or MLP biases");
    check_counts_against_tensors(c, meta, image, a);

    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
        if (meta.has(key)) {
            const uint64_t id = meta.whole(key);
            if (id >= uint64_t(c.vocab_size)) meta.fail(key, std::to_string(id) + " is outside the vocabulary");
            c.eos_token_ids.push_back(int(id));
        }
    if (meta.has("tokenizer.ggml.bos_token_id")) {
        const uint64_t id = meta.whole("tokenizer.ggml.bos_token_id");
        if (id >= uint64_t(c.vocab_size)) meta.fail("tokenizer.ggml.bos_token_id", std::to_string(id) + " is outside the vocabulary");
        c.bos_token_id = int(id);
    }
    return c;
}

namespace {

// The `llama` (SentencePiece) vocabulary: tokens, scores and types as tokenizer.json's BPE.
json sentencepiece_document(const Meta& meta, const json& tokens, const json& types) {
    SentencePieceVocab v;
    v.tokens.reserve(tokens.size());
    for (const auto& t : tokens) v.tokens.push_back(t.get<std::string>());
    v.types.assign(tokens.size(), kTokenNormal);
    for (size_t id = 0; id < types.size(); ++id) v.types[id] = types[id].get<int32_t>();
    if (!meta.has("tokenizer.ggml.scores") || !meta.m["tokenizer.ggml.scores"].is_array() ||
        meta.m["tokenizer.ggml.scores"].size() != tokens.size())
        meta.fail("tokenizer.ggml.scores", "must hold one number per token (a SentencePiece vocabulary ranks its merges by them)");
    for (const auto& score : meta.m["tokenizer.ggml.scores"]) {
        if (!score.is_number()) meta.fail("tokenizer.ggml.scores", "holds an entry that is not a number");
        v.scores.push_back(score.get<float>());
    }
    if (meta.has("tokenizer.ggml.unknown_token_id")) {
        const uint64_t id = meta.whole("tokenizer.ggml.unknown_token_id");
        if (id >= tokens.size()) meta.fail("tokenizer.ggml.unknown_token_id", std::to_string(id) + " is outside the vocabulary");
        v.unknown = int32_t(id);
    } else {
        for (size_t id = 0; id < v.types.size() && !v.unknown; ++id)
            if (v.types[id] == kTokenUnknown) v.unknown = int32_t(id);
    }
    v.add_space_prefix = meta.flag_or("tokenizer.ggml.add_space_prefix", true);
    return sentencepiece_tokenizer_json(v);
}

}  // namespace

std::pair<json, json> gguf_tokenizer_documents(const formats::GgufImage& image, const std::string& label) {
    const Meta meta{image.metadata, label};
    const std::string model = meta.text_or("tokenizer.ggml.model", "");
    if (model.empty()) meta.fail("tokenizer.ggml.model", "is missing: the file carries no tokenizer");
    if (model != "gpt2" && model != "llama")
        meta.fail("tokenizer.ggml.model", "is \"" + model + "\"; anvil-engine reads gpt2 (byte-level BPE) and llama (SentencePiece)");
    const bool sentencepiece = model == "llama";

    if (!meta.has("tokenizer.ggml.tokens") || !image.metadata["tokenizer.ggml.tokens"].is_array())
        meta.fail("tokenizer.ggml.tokens", "is missing: expected an array of strings");
    const json& tokens = image.metadata["tokenizer.ggml.tokens"];
    const json types = image.metadata.value("tokenizer.ggml.token_type", json::array());
    if (!types.is_array() || (!types.empty() && types.size() != tokens.size()))
        meta.fail("tokenizer.ggml.token_type", "must hold one integer per token");
    for (size_t id = 0; id < tokens.size(); ++id) {
        if (!tokens[id].is_string()) meta.fail("tokenizer.ggml.tokens", "[" + std::to_string(id) + "] is not a string");
        const int type = types.empty() ? kTokenNormal : types[id].is_number_integer() ? types[id].get<int>() : -1;
        if (type < kTokenNormal || type > kTokenByte)
            meta.fail("tokenizer.ggml.token_type", "[" + std::to_string(id) + "] is not a token type (1 to 6)");
        if ((type == kTokenControl || type == kTokenUserDefined || type == kTokenUnknown) && tokens[id].get_ref<const std::string&>().empty())
            meta.fail("tokenizer.ggml.tokens", "[" + std::to_string(id) + "] is an empty special token");
    }

    SplitPattern pattern = SplitPattern::Gpt2;
    json doc;
    if (sentencepiece) {
        doc = sentencepiece_document(meta, tokens, types);
    } else {
        pattern = pattern_of_pre(meta);
        json vocab = json::object();
        json added = json::array();
        for (size_t id = 0; id < tokens.size(); ++id) {
            const std::string& text = tokens[id].get_ref<const std::string&>();
            const int type = types.empty() ? kTokenNormal : types[id].get<int>();
            if (type == kTokenControl || type == kTokenUserDefined || type == kTokenUnknown) {
                added.push_back({{"id", id}, {"content", text}, {"special", type != kTokenUserDefined}});
            } else if (!vocab.contains(text)) {
                vocab[text] = id;
            }
        }
        json merges = image.metadata.value("tokenizer.ggml.merges", json::array());
        if (!merges.is_array()) meta.fail("tokenizer.ggml.merges", "is not an array of strings");
        json pre;
        if (pattern == SplitPattern::Gpt2) {
            pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
        } else {
            pre = {{"type", "Sequence"},
                   {"pretokenizers",
                    json::array({{{"type", "Split"},
                                  {"pattern", {{"Regex", split_pattern_regex(pattern)}}},
                                  {"behavior", "Isolated"},
                                  {"invert", false}},
                                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
        }
        doc = {{"model",
                {{"type", "BPE"},
                 {"vocab", std::move(vocab)},
                 {"merges", std::move(merges)},
                 {"ignore_merges", pattern == SplitPattern::Llama3}}},
               {"added_tokens", std::move(added)},
               {"pre_tokenizer", std::move(pre)}};
    }

    auto special_text = [&](const char* key) -> std::string {
        if (!meta.has(key)) return {};
        const uint64_t id = meta.whole(key);
        if (id >= tokens.size()) meta.fail(key, std::to_string(id) + " is outside the vocabulary");
        return tokens[size_t(id)].get<std::string>();
    };
    const std::string bos = special_text("tokenizer.ggml.bos_token_id");
    const std::string eos = special_text("tokenizer.ggml.eos_token_id");
    // llama.cpp adds BOS to SentencePiece and Llama 3 vocabularies unless the file says otherwise,
    // and to no other byte-level one.
    const bool add_bos = meta.flag_or("tokenizer.ggml.add_bos_token", sentencepiece || pattern == SplitPattern::Llama3);
    const bool add_eos = meta.flag_or("tokenizer.ggml.add_eos_token", false);
    json single = json::array();
    json specials = json::object();
    if (add_bos) {
        if (bos.empty()) meta.fail("tokenizer.ggml.add_bos_token", "is set but tokenizer.ggml.bos_token_id is missing");
        single.push_back({{"SpecialToken", {{"id", bos}, {"type_id", 0}}}});
        specials[bos] = {{"id", bos}, {"ids", json::array({meta.whole("tokenizer.ggml.bos_token_id")})}, {"tokens", json::array({bos})}};
    }
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos) {
        if (eos.empty()) meta.fail("tokenizer.ggml.add_eos_token", "is set but tokenizer.ggml.eos_token_id is missing");
        single.push_back({{"SpecialToken", {{"id", eos}, {"type_id", 0}}}});
        specials[eos] = {{"id", eos}, {"ids", json::array({meta.whole("tokenizer.ggml.eos_token_id")})}, {"tokens", json::array({eos})}};
    }

    doc["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
    json config = {{"bos_token", bos}, {"eos_token", eos}};
    if (meta.has("tokenizer.chat_template")) config["chat_template"] = meta.text_or("tokenizer.chat_template", "");
    return {std::move(doc), std::move(config)};
}

}  // namespace anvil::engine
