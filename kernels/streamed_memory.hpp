// Memory the kernels stream through once a token: the weights the engine converts at load, the KV
// cache, and the benchmarks' buffers measured against them. It is asked for on transparent huge
// pages (2 MB): decode reads every weight once per token, and with 4 KB pages each page of that
// stream is a TLB miss and a place where the hardware prefetchers stop, one of every 64 lines.
// On the Intel VM (THP "madvise", so ordinary allocations never got huge pages) a Q6_K matrix-vector
// stream of 85 MB went from 14.5 to 20 GB/s on one thread and from 34 to 44 GB/s on two (AVX2
// level); docs/PERFORMANCE.md has the figures.
//
// It is a request, not a requirement: where THP is off ("never") or the kernel cannot find huge
// pages, the same memory comes on 4 KB pages and nothing else changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace anvil::kernels {

constexpr size_t kHugePage = size_t(2) << 20;

struct StreamedFree {
    void operator()(void* p) const;
};
using StreamedBuffer = std::unique_ptr<uint8_t, StreamedFree>;

// `bytes` (rounded up to whole huge pages), aligned to a huge page and advised onto huge pages;
// below one huge page, plain 64-byte aligned memory. nullptr when out of memory. Not zeroed.
StreamedBuffer allocate_streamed(size_t bytes);

// A std::vector's allocator for the same memory: std::vector<T, StreamedAllocator<T>>.
template <typename T>
struct StreamedAllocator {
    using value_type = T;
    StreamedAllocator() = default;
    template <typename U>
    StreamedAllocator(const StreamedAllocator<U>&) {}
    T* allocate(size_t n) {
        StreamedBuffer buffer = allocate_streamed(n * sizeof(T));
        if (!buffer) throw std::bad_alloc();
        return reinterpret_cast<T*>(buffer.release());
    }
    void deallocate(T* p, size_t) { StreamedFree()(p); }
    template <typename U>
    bool operator==(const StreamedAllocator<U>&) const { return true; }
};
template <typename T>
using StreamedVector = std::vector<T, StreamedAllocator<T>>;

// Many buffers of a model carved out of a few huge-page chunks: a matrix of a small model is often
// well under 2 MB, and a huge page each would waste most of it. Every buffer is 64-byte aligned and
// lives as long as the arena. Chunks are `chunk_bytes` or the buffer's size if larger; a chunk's
// untouched tail costs address space only.
class StreamedArena {
public:
    explicit StreamedArena(size_t chunk_bytes = size_t(64) << 20) : chunk_bytes_(chunk_bytes) {}
    void* allocate(size_t bytes);  // nullptr when out of memory
    size_t used_bytes() const { return used_; }

private:
    size_t chunk_bytes_;
    std::vector<StreamedBuffer> chunks_;
    uint8_t* next_ = nullptr;
    size_t left_ = 0;
    size_t used_ = 0;
};

}  // namespace anvil::kernels
