#include "engine/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/ggml_blocks.hpp"

namespace anvil::engine {

const char* dtype_name(Dtype dtype) {
    switch (dtype) {
        case Dtype::F32: return "F32";
        case Dtype::F16: return "F16";
        case Dtype::BF16: return "BF16";
        case Dtype::Q8_0: return "Q8_0";
        case Dtype::Q4_0: return "Q4_0";
        case Dtype::Q5_0: return "Q5_0";
        case Dtype::Q4_K: return "Q4_K";
        case Dtype::Q6_K: return "Q6_K";
        case Dtype::Other: return "other";
    }
    return "?";
}

size_t dtype_size(Dtype dtype) {
    switch (dtype) {
        case Dtype::F32: return 4;
        case Dtype::F16:
        case Dtype::BF16: return 2;
        case Dtype::Q8_0:
        case Dtype::Q4_0:
        case Dtype::Q5_0:
        case Dtype::Q4_K:
        case Dtype::Q6_K:
        case Dtype::Other: return 0;
    }
    return 0;
}

size_t row_bytes(Dtype dtype, int64_t cols) {
    switch (dtype) {
        case Dtype::Q8_0: return size_t(cols / 32 * 34);
        case Dtype::Q4_0: return kernels::q4_0_row_bytes(int(cols));
        case Dtype::Q5_0: return kernels::q5_0_row_bytes(int(cols));
        case Dtype::Q4_K: return kernels::q4_k_row_bytes(int(cols));
        case Dtype::Q6_K: return kernels::q6_k_row_bytes(int(cols));
        default: break;
    }
    return size_t(cols) * dtype_size(dtype);
}

int64_t TensorInfo::elements() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

std::vector<TensorInfo> parse_safetensors(const uint8_t* image, size_t size, const std::string& label) {
    auto fail = [&](const std::string& what) -> std::runtime_error {
        return std::runtime_error(label + ": not a valid safetensors file: " + what);
    };
    if (size < 8) throw fail("shorter than the 8-byte header length");
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | image[i];
    if (header_size > size - 8) throw fail("header length " + std::to_string(header_size) + " runs past the end");
    if (header_size > 100'000'000) throw fail("header length " + std::to_string(header_size) + " is implausible");
    const uint8_t* data = image + 8 + header_size;
    const uint64_t data_size = size - 8 - header_size;

    nlohmann::json header;
    try {
        header = nlohmann::json::parse(image + 8, image + 8 + header_size);
    } catch (const nlohmann::json::exception& e) {
        throw fail(std::string("header is not JSON: ") + e.what());
    }
    if (!header.is_object()) throw fail("header is not a JSON object");

    // Element counts and sizes from the header are untrusted: every product is overflow-checked.
    constexpr uint64_t kLimit = uint64_t(1) << 62;
    std::vector<TensorInfo> tensors;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
            !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
            entry["data_offsets"].size() != 2)
            throw fail("tensor " + name + " needs dtype, shape and two data_offsets");
        TensorInfo t;
        t.name = name;
        t.file = label;
        t.dtype_text = entry["dtype"].get<std::string>();
        static const std::map<std::string, size_t> other_sizes = {
            {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},
            {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
        size_t element_size;
        if (t.dtype_text == "F32") t.dtype = Dtype::F32;
        else if (t.dtype_text == "F16") t.dtype = Dtype::F16;
        else if (t.dtype_text == "BF16") t.dtype = Dtype::BF16;
        if (t.dtype != Dtype::Other) {
            element_size = dtype_size(t.dtype);
        } else {
            auto it = other_sizes.find(t.dtype_text);
            if (it == other_sizes.end()) throw fail("tensor " + name + " has unknown dtype " + t.dtype_text);
            element_size = it->second;
        }
        uint64_t elements = 1;
        for (const auto& d : entry["shape"]) {
            if (!d.is_number_unsigned()) throw fail("tensor " + name + " has a shape entry that is not a size");
            const uint64_t v = d.get<uint64_t>();
            if (v > kLimit || (v != 0 && elements > kLimit / v)) throw fail("tensor " + name + " is impossibly large");
            elements *= v;
            t.shape.push_back(int64_t(v));
        }
        const auto& offsets = entry["data_offsets"];
        if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
            throw fail("tensor " + name + " has data_offsets that are not sizes");
        const uint64_t begin = offsets[0].get<uint64_t>();
        const uint64_t end = offsets[1].get<uint64_t>();
        if (begin > end || end > data_size)
            throw fail("tensor " + name + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       "] outside the " + std::to_string(data_size) + "-byte data area");
        if (elements > kLimit / element_size || end - begin != elements * element_size)
            throw fail("tensor " + name + " holds " + std::to_string(end - begin) + " bytes but its shape " +
                       shape_text(t.shape) + " of " + t.dtype_text + " needs " +
                       std::to_string(elements * element_size));
        t.data = data + begin;
        t.bytes = size_t(end - begin);
        ranges.emplace_back(begin, end);
        tensors.push_back(std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second) throw fail("two tensors overlap in the data area");
    return tensors;
}

MappedFile::MappedFile(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(path.string() + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        throw std::runtime_error(path.string() + ": cannot stat: " + std::strerror(errno));
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            ::close(fd);
            throw std::runtime_error(path.string() + ": cannot map: " + std::strerror(errno));
        }
        data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace anvil::engine
