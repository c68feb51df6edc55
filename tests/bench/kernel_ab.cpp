// Paired A/B of the GGUF block kernels and packed q8's, built by tests/bench/kernel_ab.sh (not by
// CMake): the baseline revision's matmul_{vnni,avx2}_blocks, matmul_avx512vnni and AMX tiles
// (entry points renamed *_baseline) and the working tree's, in one process, on the same packed
// matrices and the same rounded input, taking turns every pass. On a host whose speed swings
// within seconds, only such pairs settle a few percent; separate runs of two binaries do not. Each
// case prints both rates, the median ratio of the passes (new / baseline, with the quartiles), and
// whether the outputs are identical bit for bit (every change to these kernels so far keeps the
// integer sums exact and the float order, so they must be).
//
// usage: kernel_ab LEVEL PASSES CASE...   LEVEL vnni|avx2|amx, CASE FORMAT:ROWSxCOLS:COPIES:TOKENS
//        (FORMAT Q4_0, Q4_K, Q6_K, or Q8 for packed q8 at vnni and amx; COPIES matrices read in
//        turn: 1 stays in cache, enough of them streams from memory). At amx both sides hand whole
//        runs of 16 tokens to the tiles. Threads: OMP_NUM_THREADS, as the engine.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu_features.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/streamed_memory.hpp"
#include "tests/support/kernel_matrices.hpp"

using namespace anvil::kernels;

namespace anvil::kernels::detail {
// Revisions with the AMX level take whether to use the AMX tiles for batches (kernel_ab.sh says
// which this baseline is), and hold packed q8's scales in f16 as the working tree does.
#ifdef ANVIL_AB_BASELINE_TAKES_AMX
void matmul_vnni_blocks_baseline(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                                 const SuperBlockInput* q256, int n_tokens, bool amx);
void matmul_avx512vnni_baseline(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                                int n_tokens, bool amx);
#else
void matmul_vnni_blocks_baseline(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                                 const SuperBlockInput* q256, int n_tokens);
#endif
void matmul_avx2_blocks_baseline(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                                 const SuperBlockInput* q256, int n_tokens);
}  // namespace anvil::kernels::detail

namespace {

enum class Level { Avx2, Vnni, Amx };

// One side's product of a case: the rounded inputs for the GGUF formats, the f32 input for packed
// q8 (which its entry point rounds itself).
struct Inputs {
    const detail::QuantizedInput* q32;
    const detail::QuantizedInput* q32_baseline;  // as the baseline's header lays it out
    const detail::SuperBlockInput* q256;
    const float* x;
};
using Kernel = void (*)(Level, const WeightMatrix*, float* const*, const Inputs&, int);

void baseline(Level level, const WeightMatrix* w, float* const* y, const Inputs& in, int n_tokens) {
    if (level == Level::Avx2) return detail::matmul_avx2_blocks_baseline(w, y, 1, in.q32_baseline, in.q256, n_tokens);
#ifdef ANVIL_AB_BASELINE_TAKES_AMX
    const bool amx = level == Level::Amx;
    if (w->type == WeightType::Q8Packed) return detail::matmul_avx512vnni_baseline(w, y, 1, in.x, nullptr, n_tokens, amx);
    detail::matmul_vnni_blocks_baseline(w, y, 1, in.q32_baseline, in.q256, n_tokens, amx);
#else
    detail::matmul_vnni_blocks_baseline(w, y, 1, in.q32_baseline, in.q256, n_tokens);
#endif
}
void current(Level level, const WeightMatrix* w, float* const* y, const Inputs& in, int n_tokens) {
    if (level == Level::Avx2) return detail::matmul_avx2_blocks(w, y, 1, in.q32, in.q256, n_tokens);
    const bool amx = level == Level::Amx;
    if (w->type == WeightType::Q8Packed) return detail::matmul_avx512vnni(w, y, 1, in.x, nullptr, n_tokens, amx);
    detail::matmul_vnni_blocks(w, y, 1, in.q32, in.q256, n_tokens, amx);
}
using Clock = std::chrono::steady_clock;

struct Case {
    std::string format;
    int rows = 0, cols = 0, copies = 1, tokens = 1;
};

bool parse_case(const char* text, Level level, Case& c) {
    char format[16] = {};
    if (std::sscanf(text, "%15[^:]:%dx%d:%d:%d", format, &c.rows, &c.cols, &c.copies, &c.tokens) != 5) return false;
    c.format = format;
    const int values = c.format == "Q4_0" || c.format == "Q8" ? 32 : 256;
    bool format_known = c.format == "Q4_0" || c.format == "Q4_K" || c.format == "Q6_K";
#ifdef ANVIL_AB_BASELINE_TAKES_AMX
    format_known = format_known || (c.format == "Q8" && level != Level::Avx2);
#else
    (void)level;
#endif
    return format_known && c.rows > 0 && c.cols > 0 && c.cols % values == 0 && c.copies > 0 && c.tokens > 0;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Whether the two kernels' outputs were identical.
bool run(const Case& c, Level level, int passes) {
    const bool q4_0 = c.format == "Q4_0", q4_k = c.format == "Q4_K", q8 = c.format == "Q8";
    const WeightType type = q8     ? WeightType::Q8Packed
                            : q4_0 ? WeightType::Q4_0Packed8
                            : q4_k ? WeightType::Q4_KPacked8
                                   : WeightType::Q6_KPacked8;
    // Each side's layout: at the AVX2 level Q6_K is laid out for those products (Q6_KPacked8Avx2)
    // where the revision has that layout, the same values in another order (so the outputs are
    // still compared bit for bit).
    const WeightType current_type = level == Level::Avx2 && type == WeightType::Q6_KPacked8 ? WeightType::Q6_KPacked8Avx2 : type;
#ifdef ANVIL_AB_BASELINE_Q6_K_AVX2
    const WeightType types[2] = {current_type, current_type};
#else
    const WeightType types[2] = {type, current_type};
#endif
    // Quantized and packed as the engine holds them (the kernel tests' construction), then copied
    // onto huge pages, as the engine holds its weights (packed q8's f16 scales beside its bytes).
    const size_t matrix_bytes = q8     ? size_t(q8_packed_blocks(c.rows)) * kQ8PackRows * size_t(c.cols)
                                : q4_0 ? q4_0_packed8_bytes(c.rows, c.cols)
                                : q4_k ? q4_k_packed8_bytes(c.rows, c.cols)
                                       : q6_k_packed8_bytes(c.rows, c.cols);
    const size_t scale_bytes = q8 ? size_t(q8_packed_blocks(c.rows)) * kQ8PackRows * size_t(c.cols / kQ8Group) * sizeof(uint16_t) : 0;
    const size_t copy_bytes = matrix_bytes + scale_bytes;
    StreamedVector<uint8_t> packed[2] = {StreamedVector<uint8_t>(copy_bytes * size_t(c.copies)),
                                         StreamedVector<uint8_t>(types[0] == types[1] ? 0 : copy_bytes * size_t(c.copies))};
    std::vector<WeightMatrix> ws[2];
    for (int side = 0; side < 2; ++side) {
        if (side == 1 && types[0] == types[1]) {
            ws[1] = ws[0];
            break;
        }
        const anvil::test::TestMatrix m = anvil::test::make_matrix(types[side], c.rows, c.cols, 7);
        for (int i = 0; i < c.copies; ++i) {
            uint8_t* at = &packed[side][copy_bytes * size_t(i)];
            std::memcpy(at, m.view.data, matrix_bytes);
            WeightMatrix w{types[side], c.rows, c.cols, at, nullptr};
            if (q8) {
                std::memcpy(at + matrix_bytes, m.scales_f16.data(), scale_bytes);
                w.scales_f16 = reinterpret_cast<const uint16_t*>(at + matrix_bytes);
            }
            ws[side].push_back(w);
        }
    }

    const std::vector<float> x = anvil::test::random_vector(size_t(c.tokens) * c.cols, 3);
    const size_t n = x.size();
    std::vector<int8_t> q(n);
    std::vector<float> scales(n / 32);
    std::vector<int16_t> sums(n / 16), sums32(n / 32);
    std::vector<int32_t> less_8_sums(n / 32);
    detail::QuantizedInput q32{};
    // Before less_8_sums the Q4_0 products took each group's sum as int16 (QuantizedInput's third
    // member then); kernel_ab.sh says which this baseline is.
    struct Int16Sums {
        const int8_t* values;
        const float* scales;
        const int16_t* sums;
    } q32_int16{};
    detail::SuperBlockInput q256{};
    if (q4_0) {  // as matmul_group_with rounds them
        detail::quantize_input(x.data(), c.tokens, c.cols, q.data(), scales.data());
        for (size_t g = 0; g < n / 32; ++g) {
            int sum = 0;
            for (size_t k = 0; k < 32; ++k) sum += q[g * 32 + k];
            sums32[g] = int16_t(sum);
            less_8_sums[g] = -8 * sum;
        }
        q32 = {q.data(), scales.data(), less_8_sums.data()};
        q32_int16 = {q.data(), scales.data(), sums32.data()};
    } else if (!q8) {  // packed q8's entry point rounds its own
        detail::quantize_input_super(x.data(), c.tokens, c.cols, q.data(), scales.data(), sums.data(), sums32.data());
        q256 = {q.data(), scales.data(), sums.data(), sums32.data()};
    }

    const Kernel kernels[2] = {baseline, current};
#ifdef ANVIL_AB_BASELINE_INT16_SUMS
    const auto* q32_baseline = reinterpret_cast<const detail::QuantizedInput*>(&q32_int16);
#else
    const detail::QuantizedInput* q32_baseline = &q32;
#endif
    const Inputs inputs{&q32, q32_baseline, &q256, x.data()};
    std::vector<float> ys[2] = {std::vector<float>(size_t(c.tokens) * c.rows * c.copies), std::vector<float>(size_t(c.tokens) * c.rows * c.copies)};
    const auto call = [&](int k) {
        for (int i = 0; i < c.copies; ++i) {
            float* y = ys[k].data() + size_t(i) * c.tokens * c.rows;
            kernels[k](level, &ws[k][size_t(i)], &y, inputs, c.tokens);
        }
    };
    // Enough calls a pass to read at least 64 MB, or make 2e9 multiply-adds.
    const double macs = double(c.rows) * c.cols * c.tokens * c.copies;
    const int calls = std::max(1, std::min(int(64e6 / double(copy_bytes * size_t(c.copies))), int(2e9 / macs)));
    call(0);
    call(1);
    const bool identical = std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(float)) == 0;
    std::vector<double> ratios, rates[2];
    for (int pass = 0; pass < passes; ++pass) {
        double seconds[2];
        for (int turn = 0; turn < 2; ++turn) {
            const int k = (pass + turn) % 2;  // each goes first every other pass
            const auto start = Clock::now();
            for (int r = 0; r < calls; ++r) call(k);
            seconds[k] = std::chrono::duration<double>(Clock::now() - start).count();
            rates[k].push_back((c.tokens == 1 ? double(copy_bytes) * c.copies : macs) * calls / seconds[k] / 1e9);
        }
        ratios.push_back(seconds[0] / seconds[1]);
    }
    std::sort(ratios.begin(), ratios.end());
    // Decode reads its weights once a token: bytes a second; a batch, multiply-adds a second.
    const char* unit = c.tokens == 1 ? "GB/s" : "GMAC/s";
    const char* level_name = level == Level::Avx2 ? "avx2" : level == Level::Vnni ? "vnni" : "amx";
    std::printf("%-4s %5dx%-5d x%-3d %d token%s  %s, %d threads  baseline %6.2f %s  new %6.2f %s  new/baseline %.3f (%.3f-%.3f)  %s\n",
                c.format.c_str(), c.rows, c.cols, c.copies, c.tokens, c.tokens == 1 ? " " : "s", level_name, omp_get_max_threads(),
                median(rates[0]), unit, median(rates[1]), unit, ratios[ratios.size() / 2], ratios[ratios.size() / 4],
                ratios[ratios.size() * 3 / 4], identical ? "outputs identical" : "OUTPUTS DIFFER");
    return identical;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string name = argc > 1 ? argv[1] : "";
    if (argc < 4 || (name != "vnni" && name != "avx2" && name != "amx") || std::atoi(argv[2]) < 1) {
        std::fprintf(stderr, "usage: kernel_ab vnni|avx2|amx PASSES FORMAT:ROWSxCOLS:COPIES:TOKENS...\n");
        return 2;
    }
    const Level level = name == "avx2" ? Level::Avx2 : name == "vnni" ? Level::Vnni : Level::Amx;
    // Asking is what gets Linux's leave to use the tiles in this process.
    if (level == Level::Amx && !cpu_features().amx_int8) {
        std::fprintf(stderr, "kernel_ab: this CPU or kernel does not let a process use the AMX int8 tiles\n");
        return 2;
    }
    int status = 0;
    for (int i = 3; i < argc; ++i) {
        Case c;
        if (!parse_case(argv[i], level, c)) {
            std::fprintf(stderr,
                         "kernel_ab: %s: expected FORMAT:ROWSxCOLS:COPIES:TOKENS with FORMAT Q4_0, Q4_K, Q6_K (or Q8 at vnni and amx, "
                         "against a baseline with the AMX level) and whole blocks\n",
                         argv[i]);
            return 2;
        }
        if (!run(c, level, std::atoi(argv[2]))) status = 1;
    }
    return status;
}
