#include "engine/safetensors.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/gguf_model.hpp"

namespace anvil::engine {

TensorStore::TensorStore(const std::filesystem::path& model_dir) : dir_(model_dir) {
    namespace fs = std::filesystem;
    if (formats::is_model_file(model_dir)) {
        add_gguf(model_dir);
        return;
    }
    const auto index = model_dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
        std::ifstream in(index);
        nlohmann::json doc;
        try {
            doc = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            throw std::runtime_error(index.string() + ": not valid JSON: " + e.what());
        }
        if (!doc.contains("weight_map") || !doc["weight_map"].is_object())
            throw std::runtime_error(index.string() + ": weight_map is missing");
        std::set<std::string> shards;
        for (const auto& [name, shard] : doc["weight_map"].items()) {
            if (!shard.is_string()) throw std::runtime_error(index.string() + ": weight_map." + name + " is not a file name");
            const std::string file = shard.get<std::string>();
            if (file.find('/') != std::string::npos || file.starts_with("."))
                throw std::runtime_error(index.string() + ": weight_map." + name + " names a file outside the directory");
            shards.insert(file);
        }
        for (const auto& shard : shards) add_file(model_dir / shard);
        for (const auto& [name, shard] : doc["weight_map"].items()) {
            auto it = tensors_.find(name);
            if (it == tensors_.end() || it->second.file != (model_dir / shard.get<std::string>()).string())
                throw std::runtime_error(index.string() + ": weight_map puts " + name + " in " +
                                         shard.get<std::string>() + ", which does not hold it");
        }
    } else if (fs::exists(model_dir / "model.safetensors")) {
        add_file(model_dir / "model.safetensors");
    } else {
        std::vector<fs::path> found;
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(model_dir, ec))
            if (entry.path().extension() == ".safetensors") found.push_back(entry.path());
        if (ec) throw std::runtime_error(model_dir.string() + ": " + ec.message());
        std::sort(found.begin(), found.end());
        for (const auto& file : found) add_file(file);
    }
    if (tensors_.empty())
        throw std::runtime_error(model_dir.string() + ": no safetensors weights (expected model.safetensors or "
                                 "model.safetensors.index.json with its shards)");
}

void TensorStore::add_file(const std::filesystem::path& file) {
    files_.push_back(std::make_unique<MappedFile>(file));
    const MappedFile& mapped = *files_.back();
    for (auto& t : parse_safetensors(mapped.data(), mapped.size(), file.string())) {
        if (tensors_.count(t.name))
            throw std::runtime_error(file.string() + ": tensor " + t.name + " also appears in " + tensors_[t.name].file);
        tensors_.emplace(t.name, std::move(t));
    }
}

void TensorStore::add_gguf(const std::filesystem::path& file) {
    gguf_ = true;
    files_.push_back(std::make_unique<MappedFile>(file));
    const MappedFile& mapped = *files_.back();
    for (const auto& g : formats::parse_gguf(mapped.data(), mapped.size(), file.string()).tensors) {
        const auto name = hf_tensor_name(g.name);
        if (!name) continue;  // rope_freqs.weight is read as configuration; anything else is not the engine's
        TensorInfo t;
        t.name = *name;
        t.stored_name = g.name;
        t.file = file.string();
        t.dtype_text = formats::ggml_type_name(g.type);
        switch (formats::GgmlType(g.type)) {
            case formats::GgmlType::F32: t.dtype = Dtype::F32; break;
            case formats::GgmlType::F16: t.dtype = Dtype::F16; break;
            case formats::GgmlType::BF16: t.dtype = Dtype::BF16; break;
            case formats::GgmlType::Q8_0: t.dtype = Dtype::Q8_0; break;
            case formats::GgmlType::Q4_0: t.dtype = Dtype::Q4_0; break;
            case formats::GgmlType::Q5_0: t.dtype = Dtype::Q5_0; break;
            case formats::GgmlType::Q4_K: t.dtype = Dtype::Q4_K; break;
            case formats::GgmlType::Q6_K: t.dtype = Dtype::Q6_K; break;
            default: t.dtype = Dtype::Other; break;
        }
        t.shape.assign(g.ne.rbegin(), g.ne.rend());  // GGUF lists the innermost dimension first
        t.data = g.data;
        t.bytes = g.bytes;
        tensors_.emplace(t.name, std::move(t));
    }
    if (tensors_.empty()) throw std::runtime_error(file.string() + ": holds none of the tensors of a llama-family model");
}

const TensorInfo& TensorStore::get(const std::string& name, const std::vector<int64_t>& shape) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
        if (gguf_)
            throw std::runtime_error(dir_.string() + ": tensor " + gguf_tensor_name(name).value_or(name) +
                                     " is missing from the GGUF file");
        throw std::runtime_error(dir_.string() + ": tensor " + name + " is missing from the safetensors files");
    }
    const TensorInfo& t = it->second;
    const std::string& stored = t.stored_name.empty() ? name : t.stored_name;
    if (t.shape != shape)
        throw std::runtime_error(t.file + ": tensor " + stored + " has shape " + shape_text(t.shape) + ", expected " +
                                 shape_text(shape) + (gguf_ ? " from the GGUF metadata" : " from config.json"));
    if (t.dtype == Dtype::Other)
        throw std::runtime_error(t.file + ": tensor " + stored + " is " + t.dtype_text +
                                 (gguf_ ? "; anvil-engine reads F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K and Q6_K GGUF tensors"
                                        : "; anvil-engine reads F32, F16 and BF16 weights"));
    return t;
}

size_t TensorStore::total_bytes() const {
    size_t total = 0;
    for (const auto& [name, t] : tensors_) total += t.bytes;
    return total;
}


}  // namespace anvil::engine
