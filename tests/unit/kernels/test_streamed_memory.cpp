// The memory decode streams through (kernels/streamed_memory.hpp): huge-page alignment where a
// buffer is large enough to gain from it, an arena whose buffers are aligned, apart and accounted,
// and a vector allocator over the same memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/streamed_memory.hpp"

using namespace anvil::kernels;

namespace {
uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
}  // namespace

TEST_CASE("a streamed buffer of a huge page or more is aligned to one and can be written to its end", "[kernels][memory]") {
    const size_t bytes = 3 * kHugePage + 12345;
    StreamedBuffer buffer = allocate_streamed(bytes);
    REQUIRE(buffer);
    CHECK(address(buffer.get()) % kHugePage == 0);
    std::memset(buffer.get(), 0x5a, bytes);
    CHECK(buffer.get()[bytes - 1] == 0x5a);
}

TEST_CASE("a small streamed buffer is cache-line aligned and takes no huge page", "[kernels][memory]") {
    StreamedBuffer buffer = allocate_streamed(1000);
    REQUIRE(buffer);
    CHECK(address(buffer.get()) % 64 == 0);
    std::memset(buffer.get(), 1, 1000);
}

TEST_CASE("an arena hands out aligned buffers that do not overlap and counts what it hands out", "[kernels][memory]") {
    StreamedArena arena(kHugePage);  // small chunks, so that several are needed
    struct Span {
        uintptr_t begin, end;
    };
    std::vector<Span> spans;
    size_t expected = 0;
    // Sizes that are not multiples of 64, one larger than a chunk, and zero.
    for (size_t bytes : {size_t(100), size_t(64), size_t(0), size_t(700000), size_t(5) * kHugePage + 3, size_t(1), size_t(1500000)}) {
        auto* p = static_cast<uint8_t*>(arena.allocate(bytes));
        REQUIRE(p != nullptr);
        CHECK(address(p) % 64 == 0);
        std::memset(p, int(bytes & 0xff), bytes);
        spans.push_back({address(p), address(p) + bytes});
        expected += (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    }
    for (size_t a = 0; a < spans.size(); ++a)
        for (size_t b = a + 1; b < spans.size(); ++b)
            CHECK((spans[a].end <= spans[b].begin || spans[b].end <= spans[a].begin));
    CHECK(arena.used_bytes() == expected);
}

TEST_CASE("a streamed vector holds its elements on streamed memory", "[kernels][memory]") {
    StreamedVector<float> v(kHugePage / sizeof(float) + 5, 1.5f);
    CHECK(address(v.data()) % kHugePage == 0);
    v.push_back(2.5f);
    CHECK(v.front() == 1.5f);
    CHECK(v.back() == 2.5f);
}
