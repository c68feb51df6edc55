// Shared by the tests that check the forward pass against tests/reference/llama_reference.py, the
// independent NumPy implementation run as a child process: its logits, and how close the engine's
// come to them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test_support.hpp"

namespace anvil::test::engine {

inline const std::string kReference = std::string(ANVIL_EXAMPLES_DIR) + "/../tests/reference/llama_reference.py";

inline bool numpy_available() {
    static const bool available = test::run({"/usr/bin/python3", "-c", "import numpy"}).exit_code == 0;
    return available;
}

// The reference's logits for each sequence, [sequence][position * vocab + v]. `rounding`: the
// reference's options that round as the kernels do (--bf16-inputs, --q8-weights, ...).
inline std::vector<std::vector<float>> reference_logits(const std::filesystem::path& model,
                                                 const std::vector<std::vector<int32_t>>& seqs, int vocab,
                                                 const std::vector<std::string>& rounding = {}) {
    anvil::test::TempDir scratch;
    std::vector<std::string> argv = {"/usr/bin/python3", kReference, "--model", model.string(), "--out",
                                      (scratch / "logits.bin").string()};
    argv.insert(argv.end(), rounding.begin(), rounding.end());
    for (const auto& s : seqs) {
        std::string list;
        for (auto t : s) list += (list.empty() ? "" : ",") + std::to_string(t);
        argv.push_back("--tokens");
        argv.push_back(list);
    }
    const auto result = test::run(argv);
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    const std::string bytes = test::read_file(scratch / "logits.bin");
    std::vector<std::vector<float>> out;
    size_t offset = 0;
    for (const auto& s : seqs) {
        std::vector<float> logits(s.size() * size_t(vocab));
        REQUIRE(offset + logits.size() * 4 <= bytes.size());
        std::memcpy(logits.data(), bytes.data() + offset, logits.size() * 4);
        offset += logits.size() * 4;
        out.push_back(std::move(logits));
    }
    REQUIRE(offset == bytes.size());
    return out;
}

// max |engine - reference| over a position's logits, relative to that position's largest |logit|.
inline double worst_relative_error(const std::vector<float>& engine, const std::vector<float>& reference, int vocab) {
    double worst = 0;
    for (size_t p = 0; p < reference.size() / size_t(vocab); ++p) {
        double scale = 0, diff = 0;
        for (int v = 0; v < vocab; ++v) {
            scale = std::max(scale, double(std::fabs(reference[p * vocab + v])));
            diff = std::max(diff, double(std::fabs(engine[p * vocab + v] - reference[p * vocab + v])));
        }
        worst = std::max(worst, diff / scale);
    }
    return worst;
}

// Positions whose reference top token leads the runner-up by at least `margin` logits, and how
// many of those the engine's top token agrees with. Closer calls are a coin toss for any rounding.
struct Agreement {
    int clear = 0;
    int agree = 0;
    int positions = 0;
};
inline void top1_agreement(const std::vector<float>& engine, const std::vector<float>& reference, int vocab, float margin,
                    Agreement& a) {
    const size_t n = reference.size() / size_t(vocab);
    for (size_t p = 0; p < n; ++p) {
        const float* r = reference.data() + p * vocab;
        const float* e = engine.data() + p * vocab;
        const int best = int(std::max_element(r, r + vocab) - r);
        float second = -INFINITY;
        for (int v = 0; v < vocab; ++v)
            if (v != best) second = std::max(second, r[v]);
        ++a.positions;
        if (r[best] - second < margin) continue;
        ++a.clear;
        a.agree += int(std::max_element(e, e + vocab) - e) == best;
    }
}

// Per position: how many positions there are, how many lie within `tolerance` of the reference
// (relative to the position's largest logit) and the worst; an input within float rounding of a
// rounding step's midpoint may go either way, so a few positions may be further off.
struct PositionErrors {
    int positions = 0;
    int close = 0;
    double worst = 0;
};
inline void position_errors(const std::vector<float>& engine, const std::vector<float>& reference, int vocab, double tolerance,
                            PositionErrors& e) {
    for (size_t p = 0; p < reference.size() / size_t(vocab); ++p) {
        const std::vector<float> a(engine.begin() + long(p * vocab), engine.begin() + long((p + 1) * vocab));
        const std::vector<float> b(reference.begin() + long(p * vocab), reference.begin() + long((p + 1) * vocab));
        const double error = worst_relative_error(a, b, vocab);
        ++e.positions;
        e.close += error < tolerance;
        e.worst = std::max(e.worst, error);
    }
}

}  // namespace anvil::test::engine
