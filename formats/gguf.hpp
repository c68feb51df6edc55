// GGUF files (llama.cpp's model format, versions 2 and 3): the whole header validated when the
// file opens, the metadata as JSON values, and every tensor located inside the image with its
// ggml type and extent checked. Also the writer `make-model` and `convert` use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil::formats {

// The ggml tensor types by their ids in the file. Only the ones the engine reads are named here;
// the size table in gguf.cpp knows every type, so that any valid file parses and an unsupported
// tensor is refused by name, not as a broken file.
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q5_0 = 6, Q8_0 = 8, Q4_K = 12, Q6_K = 14, BF16 = 30 };

struct GgmlTypeInfo {
    const char* name;
    int block;        // elements per block
    int block_bytes;  // bytes per block
};
// nullptr for an id no ggml version has used.
const GgmlTypeInfo* ggml_type_info(uint32_t type);
std::string ggml_type_name(uint32_t type);

struct GgufTensor {
    std::string name;
    uint32_t type = 0;
    std::vector<int64_t> ne;  // as stored: ne[0] is the innermost (contiguous) dimension
    const uint8_t* data = nullptr;
    size_t bytes = 0;

    int64_t elements() const;
};

struct GgufImage {
    uint32_t version = 0;
    uint64_t alignment = 32;
    // Every key: integers as JSON integers (signed or unsigned), float32/float64 as numbers, bools,
    // strings, and arrays (of any of those, nested) as JSON arrays.
    nlohmann::json metadata = nlohmann::json::object();
    std::vector<GgufTensor> tensors;
};

// Parses a whole GGUF image. Checks the magic, the version, every key and value inside the
// image, the alignment, and each tensor: a known type, at most four dimensions, an innermost
// dimension that is a whole number of blocks, an aligned offset, its bytes inside the data area,
// no name twice and no two tensors overlapping. Throws std::runtime_error naming `label` and
// the byte offset or the key or tensor at fault.
GgufImage parse_gguf(const uint8_t* image, size_t size, const std::string& label);

// True when `path` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);
// True when `path` names a model as one file rather than a Hugging Face directory: how the engine
// tells the two apart. GGUF is the one single-file form it reads, so such a file goes to the GGUF
// reader, whose error then says what is wrong with it (a wrong magic, an empty or truncated file)
// instead of a directory's missing config.json.
bool is_model_file(const std::filesystem::path& path);

// Builds a GGUF v3 file. Metadata keys keep the order they are set in and the exact GGUF types
// llama.cpp expects of them.
class GgufWriter {
public:
    void set_u32(const std::string& key, uint32_t value);
    void set_i32(const std::string& key, int32_t value);
    void set_f32(const std::string& key, float value);
    void set_bool(const std::string& key, bool value);
    void set_string(const std::string& key, const std::string& value);
    void set_strings(const std::string& key, const std::vector<std::string>& values);
    void set_i32s(const std::string& key, const std::vector<int32_t>& values);
    void set_f32s(const std::string& key, const std::vector<float>& values);
    // `ne` innermost first; `bytes` exactly what the type and shape need.
    void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, std::vector<uint8_t> bytes);

    // Written to a temporary file beside `file`, flushed and renamed over it. Returns the size.
    size_t write(const std::filesystem::path& file) const;

private:
    std::string kv_;  // the encoded key-value pairs
    uint64_t kv_count_ = 0;
    struct Tensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> bytes;
    };
    std::vector<Tensor> tensors_;
};

}  // namespace anvil::formats
