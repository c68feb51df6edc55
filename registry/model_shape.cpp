#include "registry/model_shape.hpp"

#include <fstream>

namespace anvil::registry {

namespace {

// The same limits engine/config.cpp puts on these fields.
std::optional<std::int64_t> positive(const json& config, const char* key, std::string& problem) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) {
        problem = std::string(key) + " is missing";
        return std::nullopt;
    }
    if (!it->is_number_integer() || it->get<std::int64_t>() <= 0 || it->get<std::int64_t>() > (1 << 30)) {
        problem = std::string(key) + " must be a positive integer";
        return std::nullopt;
    }
    return it->get<std::int64_t>();
}

bool flag(const json& config, const char* key) {
    const auto it = config.find(key);
    return it != config.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

ModelShapeReading parse_model_shape(const json& config, const std::string& file) {
    ModelShapeReading out;
    if (!config.is_object()) {
        out.problem = file + ": expected a JSON object";
        return out;
    }
    std::string architecture;
    if (const auto it = config.find("architectures"); it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
        architecture = (*it)[0].get<std::string>();
    std::string problem;
    ModelShape s;
    const auto read = [&](const char* key, std::int64_t& into) {
        if (!problem.empty()) return;
        if (auto v = positive(config, key, problem)) into = *v;
    };
    read("hidden_size", s.hidden_size);
    read("intermediate_size", s.intermediate_size);
    read("num_hidden_layers", s.layers);
    read("num_attention_heads", s.heads);
    read("vocab_size", s.vocab_size);
    if (problem.empty()) {
        s.kv_heads = s.heads;
        if (config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()) read("num_key_value_heads", s.kv_heads);
    }
    if (problem.empty()) {
        if (config.contains("head_dim") && !config["head_dim"].is_null()) read("head_dim", s.head_dim);
        else if (s.hidden_size % s.heads == 0) s.head_dim = s.hidden_size / s.heads;
        else problem = "hidden_size is not a multiple of num_attention_heads";
    }
    if (!problem.empty()) {
        out.problem = file + ": " + problem;
        return out;
    }
    s.tied_embeddings = flag(config, "tie_word_embeddings");
    s.qkv_bias = architecture == "Qwen2ForCausalLM" || flag(config, "attention_bias");
    s.qk_norm = architecture == "Qwen3ForCausalLM";
    out.shape = s;
    return out;
}

ModelShapeReading read_model_shape(const std::filesystem::path& model_dir) {
    const auto file = model_dir / "config.json";
    std::ifstream in(file);
    if (!in) return {std::nullopt, file.string() + ": cannot be read"};
    try {
        return parse_model_shape(json::parse(in), file.string());
    } catch (const json::exception& e) {
        return {std::nullopt, file.string() + ": not valid JSON (" + e.what() + ")"};
    }
}

}  // namespace anvil::registry
