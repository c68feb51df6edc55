// The forward pass run as one team of threads (kernels/team.hpp) against the same pass on one
// thread: every product row, attention head and norm is one thread's work either way, so the
// logits must agree bit for bit, in decode, short batches (a team) and long prefill (a region a product).
#include <catch2/catch.hpp>

#include <omp.h>

#include "test_engine_helpers.hpp"
#include "test_support.hpp"

using anvil::engine::WeightFormat;
using anvil::test::TempDir;
using anvil::test::engine::load_model;
using anvil::test::engine::run_sequences;
using anvil::test::engine::token_sequence;

namespace {

struct Threads {
    explicit Threads(int n) : before(omp_get_max_threads()) { omp_set_num_threads(n); }
    ~Threads() { omp_set_num_threads(before); }
    int before;
};

}  // namespace

TEST_CASE("two threads as one team give one thread's logits bit for bit: decode, short batches and prefill", "[engine][kernels]") {
    struct Case {
        const char* name;
        const char* file;
        const char* dtype;
        WeightFormat format;
    };
    // GGUF blocks (Q4_K, Q6_K, Q5_0 as q8, Q4_0), q8 rounded at load, bf16 and f32 tiles.
    const Case cases[] = {{"q4_k_m", "m.gguf", "q4_k_m", WeightFormat::Stored},
                          {"q4_0", "m.gguf", "q4_0", WeightFormat::Stored},
                          {"q8", "m", "f32", WeightFormat::Q8},
                          {"bf16", "m", "f32", WeightFormat::BF16},
                          {"f32", "m", "f32", WeightFormat::F32}};
    for (const Case& c : cases) {
        SECTION(c.name) {
            TempDir dir;
            anvil::engine::make_model({dir / c.file, "small", "llama", c.dtype, 5, 1});
            const auto model = load_model(dir / c.file, c.format);
            const int vocab = model.config.vocab_size;
            const std::vector<std::vector<int32_t>> seqs = {token_sequence(9, vocab, 1), token_sequence(70, vocab, 2),
                                                            token_sequence(3, vocab, 3)};
            // 1: decode, three tokens a pass; 4: twelve; 0: the whole prompts, 82 tokens in one pass.
            for (int step : {1, 4, 0}) {
                INFO("tokens of each sequence a pass: " << step);
                std::vector<std::vector<float>> alone, team;
                {
                    Threads one(1);
                    alone = run_sequences(model, seqs, step);
                }
                {
                    Threads two(2);
                    team = run_sequences(model, seqs, step);
                }
                for (size_t s = 0; s < seqs.size(); ++s) {
                    INFO("sequence " << s);
                    CHECK(alone[s] == team[s]);
                }
            }
        }
    }
}
