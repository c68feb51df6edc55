#include "registry/model_shape.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "formats/gguf.hpp"

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
    if (config.contains("max_position_embeddings") && !config["max_position_embeddings"].is_null()) {
        read("max_position_embeddings", s.max_position);
        if (!problem.empty()) {
            out.problem = file + ": " + problem;
            return out;
        }
    }
    s.tied_embeddings = flag(config, "tie_word_embeddings");
    s.qkv_bias = architecture == "Qwen2ForCausalLM" || flag(config, "attention_bias");
    s.qk_norm = architecture == "Qwen3ForCausalLM";
    out.shape = s;
    return out;
}

namespace {

// A GGUF file's header, mapped (the tensors stay on disk), as engine/gguf_model.cpp reads it.
ModelShapeReading read_gguf_shape(const std::filesystem::path& path) {
    const std::string file = path.string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {std::nullopt, file + ": cannot be opened: " + std::strerror(errno)};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int error = errno;  // before close() may change it
        ::close(fd);
        return {std::nullopt, file + ": cannot be read: " + std::strerror(error)};
    }
    if (st.st_size <= 0) {
        ::close(fd);
        return {std::nullopt, file + ": an empty file, not a GGUF model"};
    }
    const size_t size = size_t(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return {std::nullopt, file + ": cannot be mapped: " + std::strerror(errno)};
    ModelShapeReading out;
    try {
        const formats::GgufImage image = formats::parse_gguf(static_cast<const uint8_t*>(p), size, file);
        const json& m = image.metadata;
        const std::string arch = m.value("general.architecture", std::string());
        if (arch != "llama" && arch != "qwen2" && arch != "qwen3") {
            out.problem = file + ": metadata general.architecture is "" + arch + "": not llama, qwen2 or qwen3";
        } else {
            const std::string a = arch + ".";
            std::string problem;
            ModelShape s;
            auto whole = [&](const std::string& key, std::int64_t& into, bool required) {
                if (!problem.empty()) return;
                const auto it = m.find(key);
                if (it == m.end()) {
                    if (required) problem = "metadata " + key + " is missing";
                    return;
                }
                if (!it->is_number_integer() || it->get<std::int64_t>() <= 0 || it->get<std::int64_t>() > (1 << 30)) problem = "metadata " + key + " must be a positive integer";
                else into = it->get<std::int64_t>();
            };
            whole(a + "embedding_length", s.hidden_size, true);
            whole(a + "feed_forward_length", s.intermediate_size, true);
            whole(a + "block_count", s.layers, true);
            whole(a + "attention.head_count", s.heads, true);
            whole(a + "context_length", s.max_position, true);
            s.kv_heads = s.heads;
            whole(a + "attention.head_count_kv", s.kv_heads, false);
            if (problem.empty()) {
                if (m.contains(a + "attention.key_length")) whole(a + "attention.key_length", s.head_dim, true);
                else if (s.hidden_size % s.heads == 0) s.head_dim = s.hidden_size / s.heads;
                else problem = "embedding_length is not a multiple of attention.head_count";
            }
            bool embedding = false;
            for (const auto& t : image.tensors) {
                if (t.name == "token_embd.weight" && t.ne.size() == 2) {
                    s.vocab_size = t.ne[1];
                    embedding = true;
                }
                if (t.name == "blk.0.attn_q.bias") s.qkv_bias = true;
                if (t.name == "blk.0.attn_q_norm.weight") s.qk_norm = true;
            }
            s.tied_embeddings = std::none_of(image.tensors.begin(), image.tensors.end(), [](const auto& t) { return t.name == "output.weight"; });
            if (problem.empty() && !embedding) problem = "tensor token_embd.weight is missing";
            if (problem.empty()) out.shape = s;
            else out.problem = file + ": " + problem;
        }
    } catch (const std::runtime_error& e) {
        out.problem = e.what();
    }
    ::munmap(p, size);
    return out;
}

}  // namespace

ModelShapeReading read_model_shape(const std::filesystem::path& model_dir) {
    if (formats::is_model_file(model_dir)) return read_gguf_shape(model_dir);
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
