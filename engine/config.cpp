#include "engine/config.hpp"

#include <cmath>
#include <fstream>
#include <numbers>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/gguf_model.hpp"
#include "engine/json_file.hpp"

namespace anvil::engine {
namespace {

using nlohmann::json;

struct Reader {
    const json& doc;
    std::string file;

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw std::runtime_error(file + ": " + key + " " + what);
    }
    int positive_int(const std::string& key) const {
        if (!doc.contains(key)) fail(key, "is missing");
        if (!doc[key].is_number_integer() || doc[key].get<long long>() <= 0 || doc[key].get<long long>() > (1 << 30))
            fail(key, "must be a positive integer");
        return doc[key].get<int>();
    }
    int int_or(const std::string& key, int fallback) const {
        if (!doc.contains(key) || doc[key].is_null()) return fallback;
        return positive_int(key);
    }
    double number_or(const std::string& key, double fallback) const {
        if (!doc.contains(key) || doc[key].is_null()) return fallback;
        if (!doc[key].is_number()) fail(key, "must be a number");
        return doc[key].get<double>();
    }
    bool bool_or(const std::string& key, bool fallback) const {
        if (!doc.contains(key) || doc[key].is_null()) return fallback;
        if (!doc[key].is_boolean()) fail(key, "must be true or false");
        return doc[key].get<bool>();
    }
};

std::vector<int> token_ids(const json& value) {
    std::vector<int> ids;
    if (value.is_number_integer()) ids.push_back(value.get<int>());
    if (value.is_array())
        for (const auto& v : value)
            if (v.is_number_integer()) ids.push_back(v.get<int>());
    return ids;
}

}  // namespace

const char* architecture_name(Architecture arch) {
    switch (arch) {
        case Architecture::Llama: return "LlamaForCausalLM";
        case Architecture::Qwen2: return "Qwen2ForCausalLM";
        case Architecture::Qwen3: return "Qwen3ForCausalLM";
        case Architecture::Mistral: return "MistralForCausalLM";
    }
    return "?";
}

ModelConfig load_config(const std::filesystem::path& model_dir) {
    if (formats::is_model_file(model_dir)) return GgufModel(model_dir).config();
    const auto file = model_dir / "config.json";
    const json doc = read_json_file(file);
    if (!doc.is_object()) throw std::runtime_error(file.string() + ": expected a JSON object");
    Reader r{doc, file.string()};
    ModelConfig c;

    if (!doc.contains("architectures") || !doc["architectures"].is_array() || doc["architectures"].empty() ||
        !doc["architectures"][0].is_string())
        r.fail("architectures", "is missing: expected [\"LlamaForCausalLM\"] or a Qwen2/Qwen3/Mistral equivalent");
    const std::string arch = doc["architectures"][0].get<std::string>();
    if (arch == "LlamaForCausalLM") c.arch = Architecture::Llama;
    else if (arch == "Qwen2ForCausalLM") c.arch = Architecture::Qwen2;
    else if (arch == "Qwen3ForCausalLM") c.arch = Architecture::Qwen3;
    else if (arch == "MistralForCausalLM") c.arch = Architecture::Mistral;
    else r.fail("architectures", "names " + arch + ", which anvil-engine does not run (it runs LlamaForCausalLM, "
                "Qwen2ForCausalLM, Qwen3ForCausalLM and MistralForCausalLM)");

    c.dim = r.positive_int("hidden_size");
    c.hidden_dim = r.positive_int("intermediate_size");
    c.n_layers = r.positive_int("num_hidden_layers");
    c.n_heads = r.positive_int("num_attention_heads");
    c.n_kv_heads = r.int_or("num_key_value_heads", c.n_heads);
    c.vocab_size = r.positive_int("vocab_size");
    c.max_position = r.int_or("max_position_embeddings", 2048);
    if (c.n_heads % c.n_kv_heads != 0)
        r.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(c.n_heads) + ")");
    if (doc.contains("head_dim") && !doc["head_dim"].is_null()) {
        c.head_dim = r.positive_int("head_dim");
    } else {
        if (c.dim % c.n_heads != 0) r.fail("hidden_size", "is not a multiple of num_attention_heads");
        c.head_dim = c.dim / c.n_heads;
    }
    if (c.head_dim % 2 != 0) r.fail("head_dim", "must be even for the rotary embedding");
    c.norm_eps = float(r.number_or("rms_norm_eps", 1e-6));
    c.rope_theta = r.number_or("rope_theta", 10000.0);
    c.tie_embeddings = r.bool_or("tie_word_embeddings", false);
    c.qkv_bias = c.arch == Architecture::Qwen2 ? true : r.bool_or("attention_bias", false);
    c.qk_norm = c.arch == Architecture::Qwen3;
    if (r.bool_or("mlp_bias", false)) r.fail("mlp_bias", "is true; anvil-engine runs MLPs without biases only");
    if (doc.contains("hidden_act") && doc["hidden_act"] != "silu")
        r.fail("hidden_act", "must be \"silu\" (SwiGLU)");

    // Qwen2/Qwen3 carry a sliding_window that only applies with use_sliding_window.
    const bool window_applies = c.arch == Architecture::Mistral || c.arch == Architecture::Llama
                                    ? true
                                    : r.bool_or("use_sliding_window", false);
    if (window_applies) c.sliding_window = r.int_or("sliding_window", 0);

    if (doc.contains("rope_scaling") && !doc["rope_scaling"].is_null()) {
        const json& s = doc["rope_scaling"];
        Reader sr{s, file.string() + ": rope_scaling"};
        std::string type = s.value("rope_type", s.value("type", std::string()));
        if (type == "llama3") {
            c.rope_scaling.kind = RopeScaling::Kind::Llama3;
            c.rope_scaling.factor = sr.number_or("factor", 8.0);
            c.rope_scaling.low_freq_factor = sr.number_or("low_freq_factor", 1.0);
            c.rope_scaling.high_freq_factor = sr.number_or("high_freq_factor", 4.0);
            c.rope_scaling.original_max_position = sr.int_or("original_max_position_embeddings", 8192);
            if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
                sr.fail("high_freq_factor", "must exceed low_freq_factor");
        } else if (type == "linear") {
            c.rope_scaling.kind = RopeScaling::Kind::Linear;
            c.rope_scaling.factor = sr.number_or("factor", 1.0);
        } else if (type != "default") {
            sr.fail("rope_type", "\"" + type + "\" is not supported (llama3, linear and default are)");
        }
        if (c.rope_scaling.factor <= 0) sr.fail("factor", "must be positive");
    }

    if (doc.contains("eos_token_id")) c.eos_token_ids = token_ids(doc["eos_token_id"]);
    if (doc.contains("bos_token_id") && doc["bos_token_id"].is_number_integer()) c.bos_token_id = doc["bos_token_id"];

    const auto generation = model_dir / "generation_config.json";
    if (std::filesystem::exists(generation)) {
        const json g = read_json_file(generation);
        if (g.contains("eos_token_id")) {
            auto ids = token_ids(g["eos_token_id"]);
            if (!ids.empty()) c.eos_token_ids = ids;
        }
        if (g.contains("bos_token_id") && g["bos_token_id"].is_number_integer()) c.bos_token_id = g["bos_token_id"];
    }
    for (int id : c.eos_token_ids)
        if (id < 0 || id >= c.vocab_size) r.fail("eos_token_id", std::to_string(id) + " is outside the vocabulary");
    return c;
}

std::vector<double> rope_inverse_frequencies(const ModelConfig& c) {
    const int half = c.head_dim / 2;
    std::vector<double> inv(size_t(half), 0.0);
    for (int i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(c.rope_theta, double(2 * i) / c.head_dim);
    const RopeScaling& s = c.rope_scaling;
    if (s.kind == RopeScaling::Kind::Linear) {
        for (auto& f : inv) f /= s.factor;
    } else if (s.kind == RopeScaling::Kind::Llama3) {
        const double low_wavelen = s.original_max_position / s.low_freq_factor;
        const double high_wavelen = s.original_max_position / s.high_freq_factor;
        for (auto& f : inv) {
            const double wavelen = 2 * std::numbers::pi / f;
            if (wavelen < high_wavelen) continue;
            if (wavelen > low_wavelen) {
                f /= s.factor;
            } else {
                const double smooth =
                    (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                f = (1 - smooth) * f / s.factor + smooth * f;
            }
        }
    }
    if (!c.rope_freq_factors.empty())
        for (int i = 0; i < half; ++i) inv[size_t(i)] /= c.rope_freq_factors[size_t(i)];
    return inv;
}

}  // namespace anvil::engine
