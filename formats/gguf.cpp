#include "formats/gguf.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>

namespace anvil::formats {

using nlohmann::json;

namespace {

// Every type id ggml has assigned, with its block shape (ggml.c's type_traits). Ids 4 and 5 (the
// old Q4_2/Q4_3) and 31-33 (the short-lived Q4_0_4_4 family) were retired and stay unknown.
struct KnownType {
    uint32_t id;
    GgmlTypeInfo info;
};
constexpr KnownType kTypes[] = {
    {0, {"F32", 1, 4}},       {1, {"F16", 1, 2}},       {2, {"Q4_0", 32, 18}},    {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},    {7, {"Q5_1", 32, 24}},    {8, {"Q8_0", 32, 34}},    {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},  {11, {"Q3_K", 256, 110}}, {12, {"Q4_K", 256, 144}}, {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}}, {15, {"Q8_K", 256, 292}}, {16, {"IQ2_XXS", 256, 66}}, {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}}, {20, {"IQ4_NL", 32, 18}}, {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}}, {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},     {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},      {27, {"I64", 1, 8}},      {28, {"F64", 1, 8}},      {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},     {34, {"TQ1_0", 256, 54}}, {35, {"TQ2_0", 256, 66}}, {39, {"MXFP4", 32, 17}},
};

// GGUF's value types.
enum : uint32_t {
    kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
    kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// The smallest encoding of one value of each type: bounds an array's count by the bytes left.
uint64_t min_value_bytes(uint32_t type) {
    switch (type) {
        case kU8: case kI8: case kBool: return 1;
        case kU16: case kI16: return 2;
        case kU32: case kI32: case kF32: return 4;
        case kU64: case kI64: case kF64: case kString: return 8;
        case kArray: return 12;
        default: return 0;
    }
}

constexpr uint64_t kMaxDims = 4;           // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 4;        // no real file nests arrays at all; bounds the recursion
constexpr uint64_t kMaxStringBytes = 1u << 30;

class Reader {
public:
    Reader(const uint8_t* image, size_t size, const std::string& label) : p_(image), size_(size), label_(label) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error(label_ + ": not a valid GGUF file: " + what + " (at byte " + std::to_string(at_) + ")");
    }
    size_t at() const { return at_; }
    size_t left() const { return size_ - at_; }

    template <typename T>
    T scalar(const char* what) {
        if (left() < sizeof(T)) fail(std::string("ends inside ") + what);
        T v;
        std::memcpy(&v, p_ + at_, sizeof v);
        at_ += sizeof v;
        return v;
    }
    std::string string(const char* what) {
        const uint64_t n = scalar<uint64_t>(what);
        if (n > left() || n > kMaxStringBytes)
            fail(std::string(what) + " claims " + std::to_string(n) + " bytes, more than the file holds");
        std::string s(reinterpret_cast<const char*>(p_ + at_), size_t(n));
        at_ += size_t(n);
        return s;
    }

    json value(uint32_t type, const std::string& key, int depth) {
        switch (type) {
            case kU8: return scalar<uint8_t>("a value");
            case kI8: return scalar<int8_t>("a value");
            case kU16: return scalar<uint16_t>("a value");
            case kI16: return scalar<int16_t>("a value");
            case kU32: return scalar<uint32_t>("a value");
            case kI32: return scalar<int32_t>("a value");
            case kU64: return scalar<uint64_t>("a value");
            case kI64: return scalar<int64_t>("a value");
            case kF32: {
                const float f = scalar<float>("a value");
                if (!std::isfinite(f)) fail("key " + key + " holds a float that is not finite");
                return double(f);
            }
            case kF64: {
                const double f = scalar<double>("a value");
                if (!std::isfinite(f)) fail("key " + key + " holds a float that is not finite");
                return f;
            }
            case kBool: {
                const uint8_t b = scalar<uint8_t>("a value");
                if (b > 1) fail("key " + key + " holds a bool that is neither 0 nor 1");
                return b == 1;
            }
            case kString: return string("a string");
            case kArray: {
                if (depth >= kMaxArrayNesting) fail("key " + key + " nests arrays deeper than " + std::to_string(kMaxArrayNesting));
                const uint32_t inner = scalar<uint32_t>("an array's type");
                const uint64_t n = scalar<uint64_t>("an array's length");
                const uint64_t each = min_value_bytes(inner);
                if (each == 0) fail("key " + key + " is an array of unknown value type " + std::to_string(inner));
                if (n > left() / each) fail("key " + key + " claims " + std::to_string(n) + " elements, more than the file holds");
                json out = json::array();
                out.get_ref<json::array_t&>().reserve(size_t(n));
                for (uint64_t i = 0; i < n; ++i) out.push_back(value(inner, key, depth + 1));
                return out;
            }
            default: fail("key " + key + " has unknown value type " + std::to_string(type));
        }
    }

private:
    const uint8_t* p_;
    size_t size_;
    size_t at_ = 0;
    const std::string& label_;
};

constexpr uint64_t kLimit = uint64_t(1) << 62;

void put_bytes(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string& out, T v) {
    put_bytes(out, &v, sizeof v);
}
void put_string(std::string& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out += s;
}
// A key whose value is an array of numbers of GGUF type `type`.
template <typename T>
void put_number_array(std::string& out, const std::string& key, uint32_t type, const std::vector<T>& values) {
    put_string(out, key);
    put<uint32_t>(out, kArray);
    put<uint32_t>(out, type);
    put<uint64_t>(out, values.size());
    for (auto v : values) put(out, v);
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
    for (const auto& t : kTypes)
        if (t.id == type) return &t.info;
    return nullptr;
}

std::string ggml_type_name(uint32_t type) {
    const auto* info = ggml_type_info(type);
    return info ? info->name : "type " + std::to_string(type);
}

int64_t GgufTensor::elements() const {
    int64_t n = 1;
    for (auto d : ne) n *= d;
    return n;
}

GgufImage parse_gguf(const uint8_t* image, size_t size, const std::string& label) {
    Reader r(image, size, label);
    GgufImage out;
    if (size < 4 || std::memcmp(image, "GGUF", 4) != 0) r.fail("does not start with the magic GGUF, and a model is a GGUF file or a Hugging Face model directory");
    r.scalar<uint32_t>("the magic");
    out.version = r.scalar<uint32_t>("the version");
    if (out.version != 2 && out.version != 3)
        r.fail("version " + std::to_string(out.version) + " (anvil-engine reads versions 2 and 3)");
    const uint64_t tensor_count = r.scalar<uint64_t>("the tensor count");
    const uint64_t kv_count = r.scalar<uint64_t>("the key count");
    // Each key-value pair takes at least 13 bytes and each tensor description 24: counts beyond
    // what the file could hold are refused before anything is reserved for them.
    if (kv_count > r.left() / 13) r.fail("claims " + std::to_string(kv_count) + " metadata keys, more than the file holds");
    if (tensor_count > r.left() / 24) r.fail("claims " + std::to_string(tensor_count) + " tensors, more than the file holds");

    for (uint64_t i = 0; i < kv_count; ++i) {
        std::string key = r.string("a metadata key");
        if (key.empty()) r.fail("metadata key " + std::to_string(i) + " is empty");
        if (out.metadata.contains(key)) r.fail("metadata key " + key + " appears twice");
        const uint32_t type = r.scalar<uint32_t>("a value type");
        out.metadata[key] = r.value(type, key, 0);
    }
    if (out.metadata.contains("general.alignment")) {
        const json& a = out.metadata["general.alignment"];
        if (!a.is_number_unsigned() || a.get<uint64_t>() == 0 || a.get<uint64_t>() > (1u << 20) ||
            (a.get<uint64_t>() & (a.get<uint64_t>() - 1)) != 0)
            r.fail("general.alignment must be a power of two up to 2^20");
        out.alignment = a.get<uint64_t>();
    }

    std::set<std::string> names;
    std::vector<uint64_t> offsets;
    out.tensors.reserve(size_t(tensor_count));
    for (uint64_t i = 0; i < tensor_count; ++i) {
        GgufTensor t;
        t.name = r.string("a tensor name");
        if (t.name.empty()) r.fail("tensor " + std::to_string(i) + " has no name");
        if (!names.insert(t.name).second) r.fail("tensor " + t.name + " appears twice");
        const uint32_t dims = r.scalar<uint32_t>("a tensor's dimension count");
        if (dims == 0 || dims > kMaxDims) r.fail("tensor " + t.name + " has " + std::to_string(dims) + " dimensions (1 to 4 are valid)");
        uint64_t elements = 1;
        for (uint32_t d = 0; d < dims; ++d) {
            const uint64_t n = r.scalar<uint64_t>("a tensor dimension");
            if (n == 0 || n > kLimit || elements > kLimit / n) r.fail("tensor " + t.name + " has an impossible dimension");
            elements *= n;
            t.ne.push_back(int64_t(n));
        }
        t.type = r.scalar<uint32_t>("a tensor type");
        const GgmlTypeInfo* info = ggml_type_info(t.type);
        if (!info) r.fail("tensor " + t.name + " has unknown ggml type " + std::to_string(t.type));
        if (t.ne[0] % info->block != 0)
            r.fail("tensor " + t.name + " is " + info->name + " but its rows of " + std::to_string(t.ne[0]) +
                   " are not whole blocks of " + std::to_string(info->block));
        if (elements / uint64_t(info->block) > kLimit / uint64_t(info->block_bytes))
            r.fail("tensor " + t.name + " is impossibly large");
        t.bytes = size_t(elements / uint64_t(info->block) * uint64_t(info->block_bytes));
        const uint64_t offset = r.scalar<uint64_t>("a tensor offset");
        if (offset % out.alignment != 0)
            r.fail("tensor " + t.name + " starts at offset " + std::to_string(offset) + ", not a multiple of the alignment " +
                   std::to_string(out.alignment));
        offsets.push_back(offset);
        out.tensors.push_back(std::move(t));
    }

    const uint64_t data_start = (uint64_t(r.at()) + out.alignment - 1) / out.alignment * out.alignment;
    if (data_start > size && !out.tensors.empty()) r.fail("ends before its data area");
    const uint64_t data_size = data_start <= size ? size - data_start : 0;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (size_t i = 0; i < out.tensors.size(); ++i) {
        GgufTensor& t = out.tensors[i];
        if (offsets[i] > data_size || t.bytes > data_size - offsets[i])
            throw std::runtime_error(label + ": not a valid GGUF file: tensor " + t.name + " (" + std::to_string(t.bytes) +
                                     " bytes at offset " + std::to_string(offsets[i]) + ") runs past the end of the " +
                                     std::to_string(data_size) + "-byte data area");
        t.data = image + data_start + offsets[i];
        ranges.emplace_back(offsets[i], offsets[i] + t.bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second)
            throw std::runtime_error(label + ": not a valid GGUF file: two tensors overlap in the data area");
    return out;
}

bool is_model_file(const std::filesystem::path& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
}

bool is_gguf_file(const std::filesystem::path& path) {
    if (!is_model_file(path)) return false;
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

// ---- writing ----

void GgufWriter::set_u32(const std::string& key, uint32_t value) {
    put_string(kv_, key);
    put<uint32_t>(kv_, kU32);
    put(kv_, value);
    ++kv_count_;
}
void GgufWriter::set_i32(const std::string& key, int32_t value) {
    put_string(kv_, key);
    put<uint32_t>(kv_, kI32);
    put(kv_, value);
    ++kv_count_;
}
void GgufWriter::set_f32(const std::string& key, float value) {
    put_string(kv_, key);
    put<uint32_t>(kv_, kF32);
    put(kv_, value);
    ++kv_count_;
}
void GgufWriter::set_bool(const std::string& key, bool value) {
    put_string(kv_, key);
    put<uint32_t>(kv_, kBool);
    put<uint8_t>(kv_, value ? 1 : 0);
    ++kv_count_;
}
void GgufWriter::set_string(const std::string& key, const std::string& value) {
    put_string(kv_, key);
    put<uint32_t>(kv_, kString);
    put_string(kv_, value);
    ++kv_count_;
}
void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& values) {
    put_string(kv_, key);
    put<uint32_t>(kv_, kArray);
    put<uint32_t>(kv_, kString);
    put<uint64_t>(kv_, values.size());
    for (const auto& v : values) put_string(kv_, v);
    ++kv_count_;
}
void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& values) {
    put_number_array(kv_, key, kI32, values);
    ++kv_count_;
}

void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& values) {
    put_number_array(kv_, key, kF32, values);
    ++kv_count_;
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, std::vector<uint8_t> bytes) {
    const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
    int64_t elements = 1;
    for (auto d : ne) elements *= d;
    if (!info || ne.empty() || ne.size() > kMaxDims || ne[0] % info->block != 0 ||
        size_t(elements / info->block * info->block_bytes) != bytes.size())
        throw std::logic_error("GgufWriter: tensor " + name + " has bytes that do not match its type and shape");
    tensors_.push_back({name, type, ne, std::move(bytes)});
}

size_t GgufWriter::write(const std::filesystem::path& file) const {
    constexpr uint64_t kAlign = 32;
    std::string head;
    put_bytes(head, "GGUF", 4);
    put<uint32_t>(head, 3);
    put<uint64_t>(head, tensors_.size());
    put<uint64_t>(head, kv_count_);
    head += kv_;
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        put_string(head, t.name);
        put<uint32_t>(head, uint32_t(t.ne.size()));
        for (auto d : t.ne) put<uint64_t>(head, uint64_t(d));
        put<uint32_t>(head, uint32_t(t.type));
        put<uint64_t>(head, offset);
        offset = (offset + t.bytes.size() + kAlign - 1) / kAlign * kAlign;
    }
    head.resize((head.size() + kAlign - 1) / kAlign * kAlign, '\0');

    const std::filesystem::path temporary = file.string() + ".partial";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(temporary.string() + ": cannot create: " + std::strerror(errno));
    size_t written = 0;
    auto write_all = [&](const void* p, size_t n) {
        const auto* bytes = static_cast<const uint8_t*>(p);
        while (n > 0) {
            const ssize_t w = ::write(fd, bytes, n);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                const std::string why = std::strerror(errno);
                ::close(fd);
                ::unlink(temporary.c_str());
                throw std::runtime_error(temporary.string() + ": cannot write: " + why);
            }
            bytes += w;
            n -= size_t(w);
            written += size_t(w);
        }
    };
    write_all(head.data(), head.size());
    static const uint8_t zeros[kAlign] = {};
    for (const auto& t : tensors_) {
        write_all(t.bytes.data(), t.bytes.size());
        const size_t pad = (kAlign - t.bytes.size() % kAlign) % kAlign;
        write_all(zeros, pad);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        ::unlink(temporary.c_str());
        throw std::runtime_error(temporary.string() + ": cannot flush: " + std::strerror(errno));
    }
    std::filesystem::rename(temporary, file);
    return written;
}

}  // namespace anvil::formats
