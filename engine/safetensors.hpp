// Safetensors files, memory-mapped: the header is validated as a whole when the file opens, and
// every tensor is fetched by name with its dtype and shape checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace anvil::engine {

enum class Dtype { F32, F16, BF16, Other };
const char* dtype_name(Dtype dtype);
size_t dtype_size(Dtype dtype);

struct TensorInfo {
    std::string name;
    Dtype dtype = Dtype::Other;
    std::string dtype_text;        // as written in the header, for messages about unsupported ones
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;  // inside the mapping
    size_t bytes = 0;
    std::string file;               // for messages

    int64_t elements() const;
};

// Parses a whole safetensors image (8-byte little-endian header length, JSON header, data).
// Checks every entry: known dtype, non-negative shape, offsets inside the data area, byte count
// equal to the shape's, no two tensors overlapping. Throws std::runtime_error naming `label`.
std::vector<TensorInfo> parse_safetensors(const uint8_t* image, size_t size, const std::string& label);

class MappedFile {
public:
    explicit MappedFile(const std::filesystem::path& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// All tensors of a model directory: model.safetensors, the shards named by
// model.safetensors.index.json, or every *.safetensors file.
class TensorStore {
public:
    explicit TensorStore(const std::filesystem::path& model_dir);

    bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
    // The tensor with exactly this shape; the error names the tensor, the file and both shapes.
    const TensorInfo& get(const std::string& name, const std::vector<int64_t>& shape) const;
    size_t tensor_count() const { return tensors_.size(); }
    size_t total_bytes() const;

private:
    void add_file(const std::filesystem::path& file);

    std::filesystem::path dir_;
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::map<std::string, TensorInfo> tensors_;
};

std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace anvil::engine
