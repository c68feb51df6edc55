// Matrix-vector products at decode shape (one token) over a working set larger than most caches
// (the 480 MB L3 of the Intel VM holds all but f32's), per weight format and ISA, as GB/s of
// weights streamed beside the read bandwidth of a buffer of the same size measured in the same run;
// and the matrix-matrix product at prefill shape in GFLOP/s.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/convert.hpp"
#include "kernels/cpu_features.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/streamed_memory.hpp"
#include "kernels/thread_policy.hpp"
#include "bench_bandwidth.hpp"
#include "bench_support.hpp"
#include "kernels/matmul.hpp"

using namespace anvil::kernels;
using Clock = std::chrono::steady_clock;

namespace {

// On huge pages, as the engine holds its weights (kernels/streamed_memory.hpp) and as the ceiling's
// buffer is.
struct Matrices {
    StreamedVector<float> f32;
    StreamedVector<uint16_t> bf16;
    StreamedVector<int8_t> q8;
    StreamedVector<uint8_t> packed;
    StreamedVector<float> scales;
    StreamedVector<uint16_t> scales_f16;  // the packed q8 types'
    std::vector<WeightMatrix> views;
    size_t bytes = 0;
};

// `count` matrices of rows x cols in one format, filled with small values.
Matrices make(WeightType type, int count, int rows, int cols) {
    Matrices m;
    const size_t n = size_t(count) * rows * cols;
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = float(int(i * 2654435761u % 2001) - 1000) * 1e-4f;
    const int groups = cols / kQ8Group;
    if (type == WeightType::F32) m.f32.assign(values.begin(), values.end());
    if (type == WeightType::BF16) {
        m.bf16.resize(n);
        f32_to_bf16_array(values.data(), m.bf16.data(), n);
    }
    if (type == WeightType::F16) {  // two bytes a value, held where bf16's are
        m.bf16.resize(n);
        for (size_t i = 0; i < n; ++i) m.bf16[i] = f32_to_f16(values[i]);
    }
    const bool q8 = type == WeightType::Q8 || type == WeightType::Q8Packed || type == WeightType::Q8Packed8;
    if (q8) {
        m.q8.resize(n);
        m.scales.resize(size_t(count) * rows * groups);
        for (size_t r = 0; r < size_t(count) * rows; ++r)
            quantize_q8_row(&values[r * cols], cols, &m.q8[r * cols], &m.scales[r * groups]);
    }
    if (type == WeightType::Q8Packed) {  // rows is a multiple of 16 here: no padding
        m.packed.resize(n);
        m.scales_f16.resize(m.scales.size());
        for (int i = 0; i < count; ++i)
            pack_q8(m.q8.data() + size_t(i) * rows * cols, m.scales.data() + size_t(i) * rows * groups, rows, cols,
                    m.packed.data() + size_t(i) * rows * cols, m.scales_f16.data() + size_t(i) * rows * groups);
        m.scales = StreamedVector<float>();
    }
    if (type == WeightType::Q8Packed8) {  // rows is a multiple of 8 here: no padding
        StreamedVector<int8_t> packed(n);
        m.scales_f16.resize(m.scales.size());
        for (int i = 0; i < count; ++i)
            pack_q8_rows8(m.q8.data() + size_t(i) * rows * cols, m.scales.data() + size_t(i) * rows * groups, rows, cols,
                          packed.data() + size_t(i) * rows * cols, m.scales_f16.data() + size_t(i) * rows * groups);
        m.q8 = std::move(packed);
        m.scales = StreamedVector<float>();
    }
    if (is_ggml_block_type(type)) {
        // One matrix quantized (the K-quants' scale search is slow), packed by 8 rows as the engine
        // holds it, its bytes repeated.
        const WeightType stored = type == WeightType::Q4_0Packed8 ? WeightType::Q4_0 : type == WeightType::Q4_KPacked8 ? WeightType::Q4_K : WeightType::Q6_K;
        const size_t row_bytes = stored == WeightType::Q4_0 ? q4_0_row_bytes(cols) : stored == WeightType::Q4_K ? q4_k_row_bytes(cols) : q6_k_row_bytes(cols);
        const size_t matrix_bytes = stored == WeightType::Q4_0 ? q4_0_packed8_bytes(rows, cols)
                                    : stored == WeightType::Q4_K ? q4_k_packed8_bytes(rows, cols)
                                                                 : q6_k_packed8_bytes(rows, cols);
        m.packed.resize(std::max(matrix_bytes, row_bytes * size_t(rows)) * size_t(count));
#pragma omp parallel for
        for (int r = 0; r < rows; ++r) {
            const float* in = &values[size_t(r) * cols];
            uint8_t* out = &m.packed[size_t(r) * row_bytes];
            if (stored == WeightType::Q4_0) quantize_q4_0(in, size_t(cols), out);
            else if (stored == WeightType::Q4_K) quantize_q4_k(in, size_t(cols), out);
            else quantize_q6_k(in, size_t(cols), out);
        }
        std::vector<uint8_t> packed(matrix_bytes);
        (stored == WeightType::Q4_0   ? pack_q4_0_rows8
         : stored == WeightType::Q4_K ? pack_q4_k_rows8
         : type == WeightType::Q6_KPacked8 ? pack_q6_k_rows8
                                           : pack_q6_k_rows8_avx2)(m.packed.data(), rows, cols, packed.data());
        std::memcpy(m.packed.data(), packed.data(), matrix_bytes);
        m.packed.resize(matrix_bytes * size_t(count));
        for (int i = 1; i < count; ++i) std::memcpy(&m.packed[matrix_bytes * size_t(i)], m.packed.data(), matrix_bytes);
        for (int i = 0; i < count; ++i) m.views.push_back({type, rows, cols, &m.packed[matrix_bytes * size_t(i)], nullptr});
        m.bytes = m.packed.size();
        return m;
    }
    for (int i = 0; i < count; ++i) {
        const size_t offset = size_t(i) * rows * cols;
        WeightMatrix w{type, rows, cols, nullptr, nullptr};
        if (type == WeightType::F32) w.data = m.f32.data() + offset;
        if (type == WeightType::BF16 || type == WeightType::F16) w.data = m.bf16.data() + offset;
        if (type == WeightType::Q8 || type == WeightType::Q8Packed8) w.data = m.q8.data() + offset;
        if (type == WeightType::Q8Packed) w.data = m.packed.data() + offset;
        if (type == WeightType::Q8) w.scales = m.scales.data() + size_t(i) * rows * groups;
        if (type == WeightType::Q8Packed || type == WeightType::Q8Packed8) w.scales_f16 = m.scales_f16.data() + size_t(i) * rows * groups;
        m.views.push_back(w);
    }
    const size_t per = type == WeightType::F32 ? 4 : type == WeightType::BF16 || type == WeightType::F16 ? 2 : 1;
    m.bytes = n * per + m.scales.size() * 4 + m.scales_f16.size() * 2;
    return m;
}

}  // namespace

int main(int, char** argv) {
    anvil::kernels::prefer_passive_openmp_waiting(argv);  // as anvil-engine serves
    const int rows = 2816, cols = 1024;
    std::printf("bench_engine_kernels: %d threads, matrices %d x %d\n", omp_get_max_threads(), rows, cols);
    std::printf("cpu       %s\n", anvil::bench::cpu_description().c_str());
    const double bandwidth = anvil::bench::read_bandwidth();
    std::printf("baseline  memory read bandwidth                  %7.2f GB/s  (1 GiB buffer)\n", bandwidth / 1e9);
    std::vector<Isa> isas = {Isa::Avx2};
    if (cpu_features().avx512) isas.push_back(Isa::Avx512);
    if (cpu_features().avx512_vnni) isas.push_back(Isa::Avx512Vnni);
    if (cpu_features().avx512_bf16) isas.push_back(Isa::Avx512Bf16);
    if (cpu_features().amx_int8) isas.push_back(Isa::Amx);
    std::vector<float> x(size_t(64) * cols, 0.01f), y(size_t(64) * rows);
    // e.g. "Q4_K Q6_K": just these formats, each word matched against a name's first word, so that
    // "Q4_0" selects "Q4_0 (packed by 8)" and "q8" only q8 itself.
    const char* only = std::getenv("ANVIL_BENCH_FORMATS");
    const auto chosen = [only](WeightType type) {
        if (!only) return true;
        std::string first = weight_type_name(type);
        first = first.substr(0, first.find(' '));
        std::istringstream words(only);
        for (std::string word; words >> word;)
            if (word == first) return true;
        return false;
    };
    for (WeightType type : {WeightType::F32, WeightType::BF16, WeightType::F16, WeightType::Q8, WeightType::Q8Packed, WeightType::Q8Packed8,
                            WeightType::Q4_0Packed8, WeightType::Q4_KPacked8, WeightType::Q6_KPacked8, WeightType::Q6_KPacked8Avx2}) {
        if (!chosen(type)) continue;
        // About 512 MB of f32 (fewer bytes for the narrower formats), far past any cache.
        const Matrices m = make(type, 44, rows, cols);
        const double same_size = anvil::bench::read_bandwidth(m.bytes);
        // The int8 dot product level differs from avx512 only for q8 weights, the bf16 one only
        // for bf16 weights.
        // The packed q8 layout is only the VNNI level's (and the AMX level's for batches); q8 packed
        // by 8 runs the same AVX2 kernel at every vector level; GGUF's blocks have an AVX2 kernel and
        // a VNNI one (with the AMX tiles for batches), but for Q6_K, whose layouts are one for each
        // (the AVX2 one running at every level).
        const auto skip = [type](Isa isa) {
            if (type == WeightType::Q8Packed || type == WeightType::Q6_KPacked8) return isa != Isa::Avx512Vnni && isa != Isa::Amx;
            if (type == WeightType::Q8Packed8 || type == WeightType::Q6_KPacked8Avx2) return isa != Isa::Avx2;
            if (is_ggml_block_type(type)) return isa != Isa::Avx2 && isa != Isa::Avx512Vnni && isa != Isa::Amx;
            return (isa == Isa::Avx512Vnni && type != WeightType::Q8) || (isa == Isa::Avx512Bf16 && type != WeightType::BF16) ||
                   isa == Isa::Amx;
        };
        for (Isa isa : isas) {
            if (skip(isa)) continue;
            for (const auto& w : m.views) matmul_with(isa, w, x.data(), 1, y.data());  // warm
            double best = 0;
            for (int pass = 0; pass < 3; ++pass) {
                const auto start = Clock::now();
                for (const auto& w : m.views) matmul_with(isa, w, x.data(), 1, y.data());
                best = std::max(best, double(m.bytes) / std::chrono::duration<double>(Clock::now() - start).count());
            }
            std::printf("matvec    %-4s %-10s           %7.2f GB/s  fraction %.2f  (%.0f MB read at %.2f GB/s)\n",
                        weight_type_name(type), isa_name(isa).c_str(), best / 1e9, best / same_size, m.bytes / 1e6,
                        same_size / 1e9);
        }
        // The kernel's own rate, its weights held in cache: the first matrix's first 1024 rows (under
        // a megabyte for the GGUF blocks, 2-4 MB for bf16 and f32) read again and again. Where this
        // is not well above the streamed rate, the product is bound by its instructions, not by
        // memory (one Zen 5 core reads 35-42 GB/s). Fewer rows measure the call's fixed cost (a few
        // microseconds) more than the kernel.
        for (Isa isa : isas) {
            if (skip(isa)) continue;
            WeightMatrix w = m.views[0];
            w.rows = 1024;
            const size_t bytes = m.bytes / m.views.size() * size_t(w.rows) / size_t(rows);
            for (int i = 0; i < 100; ++i) matmul_with(isa, w, x.data(), 1, y.data());
            double best = 0;
            for (int pass = 0; pass < 5; ++pass) {
                const auto start = Clock::now();
                for (int i = 0; i < 100; ++i) matmul_with(isa, w, x.data(), 1, y.data());
                best = std::max(best, 100.0 * double(bytes) / std::chrono::duration<double>(Clock::now() - start).count());
            }
            std::printf("matvec    %-4s %-10s in cache  %7.2f GB/s  (%.2f MB held)\n", weight_type_name(type), isa_name(isa).c_str(),
                        best / 1e9, bytes / 1e6);
        }
        for (Isa isa : isas) {
            if (skip(isa)) continue;
            const auto start = Clock::now();
            for (int i = 0; i < 4; ++i) matmul_with(isa, m.views[size_t(i)], x.data(), 64, y.data());
            const double s = std::chrono::duration<double>(Clock::now() - start).count();
            std::printf("matmul    %-4s %-10s 64 tokens %7.2f GFLOP/s\n", weight_type_name(type), isa_name(isa).c_str(),
                        4.0 * 2 * rows * cols * 64 / s / 1e9);
        }
    }
    return 0;
}
