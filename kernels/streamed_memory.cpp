#include "kernels/streamed_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

namespace anvil::kernels {

void StreamedFree::operator()(void* p) const { std::free(p); }

StreamedBuffer allocate_streamed(size_t bytes) {
    if (bytes < kHugePage) {
        // Too small to gain (the second-level TLB covers several MB of small pages), and a huge
        // page each would take 2 MB of memory for it.
        return StreamedBuffer(static_cast<uint8_t*>(std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64)));
    }
    const size_t rounded = (std::max<size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p == nullptr) return nullptr;
    // Only a hint: EINVAL where the kernel has no THP, and the memory is usable either way.
    ::madvise(p, rounded, MADV_HUGEPAGE);
    return StreamedBuffer(static_cast<uint8_t*>(p));
}

void* StreamedArena::allocate(size_t bytes) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    if (rounded > left_) {
        StreamedBuffer chunk = allocate_streamed(std::max(rounded, chunk_bytes_));
        if (!chunk) return nullptr;
        next_ = chunk.get();
        left_ = std::max(rounded, chunk_bytes_);
        chunks_.push_back(std::move(chunk));
    }
    void* p = next_;
    next_ += rounded;
    left_ -= rounded;
    used_ += rounded;
    return p;
}

}  // namespace anvil::kernels
