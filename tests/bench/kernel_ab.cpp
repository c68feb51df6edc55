// Paired A/B of the GGUF block kernels, built by tests/bench/kernel_ab.sh (not by CMake): the
// baseline revision's matmul_{vnni,avx2}_blocks (entry points renamed *_baseline) and the working
// tree's, in one process, on the same packed matrices and the same rounded input, taking turns
// every pass. On a host whose speed swings within seconds, only such pairs settle a few percent;
// separate runs of two binaries do not. Each case prints both rates, the median ratio of the
// passes (new / baseline, with the quartiles), and whether the outputs are identical bit for bit
// (every change to these kernels so far keeps the integer sums exact and the float order, so they
// must be).
//
// usage: kernel_ab LEVEL PASSES CASE...   LEVEL vnni|avx2, CASE FORMAT:ROWSxCOLS:COPIES:TOKENS
//        (FORMAT Q4_0, Q4_K or Q6_K; COPIES matrices read in turn: 1 stays in cache, enough of
//        them streams from memory). Threads: OMP_NUM_THREADS, as the engine.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/streamed_memory.hpp"
#include "tests/support/kernel_matrices.hpp"

using namespace anvil::kernels;

namespace anvil::kernels::detail {
// Revisions from session 31 on take whether to use the AMX tiles for batches (kernel_ab.sh says
// which this baseline is); both sides here run the VNNI tiles.
void matmul_vnni_blocks_baseline(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                                 const SuperBlockInput* q256, int n_tokens
#ifdef ANVIL_AB_BASELINE_TAKES_AMX
                                 ,
                                 bool amx
#endif
);
void matmul_avx2_blocks_baseline(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                                 const SuperBlockInput* q256, int n_tokens);
}  // namespace anvil::kernels::detail

namespace {

using Kernel = void (*)(const WeightMatrix*, float* const*, int, const detail::QuantizedInput*, const detail::SuperBlockInput*, int);

void vnni_baseline(const WeightMatrix* ws, float* const* ys, int count, const detail::QuantizedInput* q32, const detail::SuperBlockInput* q256,
                   int n_tokens) {
#ifdef ANVIL_AB_BASELINE_TAKES_AMX
    detail::matmul_vnni_blocks_baseline(ws, ys, count, q32, q256, n_tokens, false);
#else
    detail::matmul_vnni_blocks_baseline(ws, ys, count, q32, q256, n_tokens);
#endif
}
void vnni_current(const WeightMatrix* ws, float* const* ys, int count, const detail::QuantizedInput* q32, const detail::SuperBlockInput* q256,
                  int n_tokens) {
    detail::matmul_vnni_blocks(ws, ys, count, q32, q256, n_tokens, false);
}
using Clock = std::chrono::steady_clock;

struct Case {
    std::string format;
    int rows = 0, cols = 0, copies = 1, tokens = 1;
};

bool parse_case(const char* text, Case& c) {
    char format[16] = {};
    if (std::sscanf(text, "%15[^:]:%dx%d:%d:%d", format, &c.rows, &c.cols, &c.copies, &c.tokens) != 5) return false;
    c.format = format;
    const int values = c.format == "Q4_0" ? 32 : 256;
    return (c.format == "Q4_0" || c.format == "Q4_K" || c.format == "Q6_K") && c.rows > 0 && c.cols > 0 && c.cols % values == 0 &&
           c.copies > 0 && c.tokens > 0;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Whether the two kernels' outputs were identical.
bool run(const Case& c, bool vnni, int passes) {
    const bool q4_0 = c.format == "Q4_0", q4_k = c.format == "Q4_K";
    const WeightType type = q4_0 ? WeightType::Q4_0Packed8 : q4_k ? WeightType::Q4_KPacked8 : WeightType::Q6_KPacked8;
    // Quantized and packed as the engine holds them (the kernel tests' construction), then copied
    // onto huge pages, as the engine holds its weights.
    const anvil::test::TestMatrix m = anvil::test::make_matrix(type, c.rows, c.cols, 7);
    const size_t matrix_bytes = q4_0 ? q4_0_packed8_bytes(c.rows, c.cols) : q4_k ? q4_k_packed8_bytes(c.rows, c.cols)
                                                                               : q6_k_packed8_bytes(c.rows, c.cols);
    StreamedVector<uint8_t> packed(matrix_bytes * size_t(c.copies));
    for (int i = 0; i < c.copies; ++i) std::memcpy(&packed[matrix_bytes * size_t(i)], m.view.data, matrix_bytes);
    std::vector<WeightMatrix> ws;
    for (int i = 0; i < c.copies; ++i) ws.push_back({type, c.rows, c.cols, &packed[matrix_bytes * size_t(i)], nullptr});

    const std::vector<float> x = anvil::test::random_vector(size_t(c.tokens) * c.cols, 3);
    const size_t n = x.size();
    std::vector<int8_t> q(n);
    std::vector<float> scales(n / 32);
    std::vector<int16_t> sums(n / 16), sums32(n / 32);
    detail::QuantizedInput q32{};
    detail::SuperBlockInput q256{};
    if (q4_0) {  // as matmul_group_with rounds them
        detail::quantize_input(x.data(), c.tokens, c.cols, q.data(), scales.data());
        for (size_t g = 0; g < n / 32; ++g) {
            int sum = 0;
            for (size_t k = 0; k < 32; ++k) sum += q[g * 32 + k];
            sums32[g] = int16_t(sum);
        }
        q32 = {q.data(), scales.data(), sums32.data()};
    } else {
        detail::quantize_input_super(x.data(), c.tokens, c.cols, q.data(), scales.data(), sums.data(), sums32.data());
        q256 = {q.data(), scales.data(), sums.data(), sums32.data()};
    }

    const Kernel kernels[2] = {vnni ? vnni_baseline : detail::matmul_avx2_blocks_baseline, vnni ? vnni_current : detail::matmul_avx2_blocks};
    std::vector<float> ys[2] = {std::vector<float>(size_t(c.tokens) * c.rows * c.copies), std::vector<float>(size_t(c.tokens) * c.rows * c.copies)};
    const auto call = [&](int k) {
        for (int i = 0; i < c.copies; ++i) {
            float* y = ys[k].data() + size_t(i) * c.tokens * c.rows;
            kernels[k](&ws[size_t(i)], &y, 1, &q32, &q256, c.tokens);
        }
    };
    // Enough calls a pass to read at least 64 MB.
    const int calls = std::max(1, int(64e6 / double(matrix_bytes * size_t(c.copies))));
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
            rates[k].push_back(double(matrix_bytes) * c.copies * calls / seconds[k] / 1e9);
        }
        ratios.push_back(seconds[0] / seconds[1]);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("%-4s %5dx%-5d x%-3d %d token%s  %s, %d threads  baseline %6.2f GB/s  new %6.2f GB/s  new/baseline %.3f (%.3f-%.3f)  %s\n",
                c.format.c_str(), c.rows, c.cols, c.copies, c.tokens, c.tokens == 1 ? " " : "s", vnni ? "vnni" : "avx2",
                omp_get_max_threads(), median(rates[0]), median(rates[1]), ratios[ratios.size() / 2], ratios[ratios.size() / 4],
                ratios[ratios.size() * 3 / 4], identical ? "outputs identical" : "OUTPUTS DIFFER");
    return identical;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4 || (std::strcmp(argv[1], "vnni") && std::strcmp(argv[1], "avx2")) || std::atoi(argv[2]) < 1) {
        std::fprintf(stderr, "usage: kernel_ab vnni|avx2 PASSES FORMAT:ROWSxCOLS:COPIES:TOKENS...\n");
        return 2;
    }
    const bool vnni = !std::strcmp(argv[1], "vnni");
    int status = 0;
    for (int i = 3; i < argc; ++i) {
        Case c;
        if (!parse_case(argv[i], c)) {
            std::fprintf(stderr, "kernel_ab: %s: expected FORMAT:ROWSxCOLS:COPIES:TOKENS with FORMAT Q4_0, Q4_K or Q6_K and whole blocks\n",
                         argv[i]);
            return 2;
        }
        if (!run(c, vnni, std::atoi(argv[2]))) status = 1;
    }
    return status;
}
