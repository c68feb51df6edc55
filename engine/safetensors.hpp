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

// Q8_0, Q4_0, Q5_0, Q4_K and Q6_K come from GGUF files only: blocks of values (kernels/ggml_blocks.hpp;
// Q8_0 is 32 values, an f16 scale and 32 int8 each).
enum class Dtype { F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, Other };
const char* dtype_name(Dtype dtype);
size_t dtype_size(Dtype dtype);  // bytes per element; 0 for the block formats (see row_bytes)
// The bytes of one row of `cols` values.
size_t row_bytes(Dtype dtype, int64_t cols);

struct TensorInfo {
    std::string name;
    Dtype dtype = Dtype::Other;
    std::string dtype_text;        // as written in the header, for messages about unsupported ones
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;  // inside the mapping
    size_t bytes = 0;
    std::string file;               // for messages
    std::string stored_name;        // the name in the file, when it differs (GGUF)

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
// model.safetensors.index.json, or every *.safetensors file. Or those of a GGUF file, under
// their Hugging Face names and shapes ([rows, cols]).
class TensorStore {
public:
    explicit TensorStore(const std::filesystem::path& model);

    bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
    // The tensor with exactly this shape; the error names the tensor, the file and both shapes.
    const TensorInfo& get(const std::string& name, const std::vector<int64_t>& shape) const;
    size_t tensor_count() const { return tensors_.size(); }
    size_t total_bytes() const;

private:
    void add_file(const std::filesystem::path& file);
    void add_gguf(const std::filesystem::path& file);

    std::filesystem::path dir_;
    bool gguf_ = false;
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::map<std::string, TensorInfo> tensors_;
};

std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace anvil::engine
