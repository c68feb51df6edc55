#include "engine/model_runner.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/attention.hpp"
#include "kernels/matmul.hpp"
#include "kernels/ops.hpp"
#include "kernels/team.hpp"

namespace anvil::engine {

namespace {
constexpr int kHeadsTogether = 4;  // query heads of one kv head that attention_heads takes at once
constexpr int kTeamTokens = 64;    // batches up to this many tokens run as one team
}  // namespace

ModelRunner::ModelRunner(const ModelConfig& config, const ModelWeights& weights, const RunnerOptions& options)
    : config_(config),
      weights_(weights),
      options_(options),
      kv_(options.kv_type, config.n_layers, options.kv_blocks, options.block_size, config.n_kv_heads, config.head_dim),
      threads_(options.threads > 0 ? options.threads : omp_get_max_threads()) {
    if (options.max_batch_tokens <= 0 || options.max_logit_rows <= 0 || options.max_context <= 0 ||
        options.kv_blocks <= 0 || options.block_size <= 0)
        throw std::invalid_argument("runner options must all be positive");
    const int half = config.head_dim / 2;
    const auto inverse = rope_inverse_frequencies(config);
    rope_cos_.resize(size_t(options.max_context) * half);
    rope_sin_.resize(size_t(options.max_context) * half);
    for (int p = 0; p < options.max_context; ++p)
        for (int i = 0; i < half; ++i) {
            const double angle = double(p) * inverse[size_t(i)];
            rope_cos_[size_t(p) * half + i] = float(std::cos(angle));
            rope_sin_[size_t(p) * half + i] = float(std::sin(angle));
        }
    const size_t n = size_t(options.max_batch_tokens);
    x_.resize(n * config.dim);
    xb_.resize(n * config.dim);
    xb2_.resize(n * config.dim);
    q_.resize(n * config.q_dim());
    k_.resize(n * config.kv_dim());
    v_.resize(n * config.kv_dim());
    att_.resize(n * config.q_dim());
    hb_.resize(n * config.hidden_dim);
    hb2_.resize(n * config.hidden_dim);
    scores_.resize(size_t(threads_) * kHeadsTogether * options.max_context);
    if (threads_ > 1) {
        team_ = std::make_unique<kernels::Team>(std::min(threads_, kernels::kMaxTeam));
        const size_t copies = size_t(team_->capacity() - 1) * size_t(std::min(options.max_batch_tokens, kTeamTokens)) * config.dim;
        team_x_.resize(copies);
        team_xb_.resize(copies);
    }
    final_.resize(size_t(options.max_logit_rows) * config.dim);
    logits_.resize(size_t(options.max_logit_rows) * config.vocab_size);
}

void ModelRunner::forward(const Batch& batch, int exit_after) {
    check_batch(batch, config_, options_);
    if (exit_after < 0 || exit_after > config_.n_layers) throw std::logic_error("early exit after a layer the model lacks");
    // OpenMP's thread count is per calling thread: fix it here, whichever thread runs the model,
    // because the attention scratch is sized for exactly this many.
    omp_set_num_threads(threads_);
    const int layers = exit_after > 0 ? exit_after : config_.n_layers;
    // Decode and short batches: the threads run the whole pass as one team, meeting between steps
    // (kernels/team.hpp) rather than forking a region for each of ~49 products a token. Longer
    // prefill chunks keep a region a product: its fork is small beside the product.
    if (team_ && batch.size() <= kTeamTokens) kernels::run_as_team(*team_, [&] { run_layers(batch, layers); });
    else run_layers(batch, layers);
}

// Every step goes through share_items, which ends at the team's barrier when there is a team: the
// per-token steps are shared out token by token, attention by kv head, the products row by row
// inside the kernels. But the residual stream and its norms are every thread's own in a team: each
// adds a block's output to its own copy and norms it for the next product itself, the same values
// in the same order on every thread, so no barrier separates a product from the norm before the
// next (the thread that normed a lone token alone kept the others waiting). Outside a team the one
// thread does them in turn. A lone token meets six times a layer
// (docs/PERFORMANCE.md, "Threads and barriers").
void ModelRunner::run_layers(const Batch& batch, int layers) {
    const ModelConfig& c = config_;
    const int n = batch.size();
    const int me = kernels::current_team() ? omp_get_thread_num() : 0;
    const size_t copy = me == 0 ? 0 : size_t(me - 1) * size_t(std::min(options_.max_batch_tokens, kTeamTokens)) * c.dim;
    float* const x = me == 0 ? x_.data() : team_x_.data() + copy;
    float* const xb = me == 0 ? xb_.data() : team_xb_.data() + copy;
    const int dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim, half = hd / 2;
    const int group = c.n_heads / c.n_kv_heads;
    const int chunks = (group + kHeadsTogether - 1) / kHeadsTogether;
    const float scale = 1.0f / std::sqrt(float(hd));
    const int block_size = options_.block_size;
    // Elementwise steps over [n][width] in pieces of this many values: pieces of whole vectors
    // share the work without changing any value. Small enough that a lone token's 2816 gated
    // values split 5 : 6 between two threads, not 1 : 2.
    constexpr int kPiece = 256;
    auto in_pieces = [&](int width, auto&& body) {
        const int total = n * width;
        kernels::share_items(false, (total + kPiece - 1) / kPiece, 1, [&](int piece) {
            const int first = piece * kPiece;
            body(first, std::min(kPiece, total - first));
        });
    };

    for (int i = 0; i < n; ++i) kernels::dequantize_row(weights_.embedding, batch.tokens[size_t(i)], &x[size_t(i) * dim]);
    // Attention is spread over threads only when there is enough of it to pay for waking them.
    constexpr double kParallelAttention = 1 << 16;
    double attention_work = 0;
    for (int i = 0; i < n; ++i) attention_work += double(batch.positions[size_t(i)] + 1) * c.n_heads * hd;

    for (int l = 0; l < layers; ++l) {
        const LayerWeights& w = weights_.layers[size_t(l)];
        // The previous layer's feed-forward output joins the residual stream here, with this layer's norm.
        for (int i = 0; i < n; ++i) {
            if (l > 0) kernels::add(&x[size_t(i) * dim], &xb2_[size_t(i) * dim], dim);
            kernels::rmsnorm(&xb[size_t(i) * dim], &x[size_t(i) * dim], w.attn_norm, dim, c.norm_eps);
        }
        const kernels::WeightMatrix qkv[] = {w.wq, w.wk, w.wv};
        float* const qkv_out[] = {q_.data(), k_.data(), v_.data()};
        kernels::matmul_group(qkv, qkv_out, 3, xb, n);

        // Token i's q, k and v made ready for attention for kv heads h0..h0 + count - 1 and their query
        // heads: biases, per-head norms, rope, and the keys and values into the cache. Head by head
        // the same operations as on the whole vectors.
        const auto prepare = [&](int i, int h0, int count) {
            float* q = &q_[size_t(i) * q_dim + size_t(h0) * group * hd];
            float* k = &k_[size_t(i) * kv_dim];
            float* v = &v_[size_t(i) * kv_dim];
            const int heads = count * group;
            if (w.bq) {
                kernels::add(q, w.bq + size_t(h0) * group * hd, heads * hd);
                kernels::add(k + h0 * hd, w.bk + h0 * hd, count * hd);
                kernels::add(v + h0 * hd, w.bv + h0 * hd, count * hd);
            }
            if (w.q_norm) {
                for (int h = 0; h < heads; ++h) kernels::rmsnorm(q + h * hd, q + h * hd, w.q_norm, hd, c.norm_eps);
                for (int h = h0; h < h0 + count; ++h) kernels::rmsnorm(k + h * hd, k + h * hd, w.k_norm, hd, c.norm_eps);
            }
            const size_t p = size_t(batch.positions[size_t(i)]);
            const auto rope = c.rope_pairs ? kernels::rope_pairs : kernels::rope;
            rope(q, heads, hd, &rope_cos_[p * half], &rope_sin_[p * half]);
            rope(k + h0 * hd, count, hd, &rope_cos_[p * half], &rope_sin_[p * half]);
            const int32_t* table = batch.block_tables[size_t(batch.sequence[size_t(i)])];
            kv_.write_heads(l, table[p / block_size], int(p % block_size), h0, count, k, v);
        };
        // A lone token whose kv heads each make one attention item prepares each head in its item,
        // with no step and barrier of its own: the item reads no key but its head's, its own
        // position's included. Several tokens (a prefill chunk, a draft to verify) may read each
        // other's keys, so all are written first.
        const bool prepare_in_items = n == 1 && chunks == 1;
        if (!prepare_in_items) kernels::share_items(n > 1, n, 1, [&](int i) { prepare(i, 0, c.n_kv_heads); });

        const kernels::PagedKv kv = kv_.layer(l);
        // A work item is up to four query heads of one kv head: they read its keys and values once.
        const int items = c.n_kv_heads * chunks;
        kernels::share_items(attention_work >= kParallelAttention, n * items, 1, [&](int work) {
            const int i = work / items, item = work % items;
            const int kv_head = item / chunks, h = kv_head * group + (item % chunks) * kHeadsTogether;
            if (prepare_in_items) prepare(i, kv_head, 1);
            const int position = batch.positions[size_t(i)];
            const int first = c.sliding_window > 0 ? std::max(0, position + 1 - c.sliding_window) : 0;
            float* scores = &scores_[size_t(omp_get_thread_num()) * kHeadsTogether * options_.max_context];
            kernels::attention_heads(&q_[size_t(i) * q_dim + h * hd], std::min(kHeadsTogether, group - (item % chunks) * kHeadsTogether),
                                     kv, kv_head, batch.block_tables[size_t(batch.sequence[size_t(i)])], first,
                                     position + 1 - first, scale, scores, &att_[size_t(i) * q_dim + h * hd]);
        });

        kernels::matmul(w.wo, att_.data(), n, xb2_.data());
        for (int i = 0; i < n; ++i) {
            kernels::add(&x[size_t(i) * dim], &xb2_[size_t(i) * dim], dim);
            kernels::rmsnorm(&xb[size_t(i) * dim], &x[size_t(i) * dim], w.ffn_norm, dim, c.norm_eps);
        }
        const kernels::WeightMatrix gate_up[] = {w.w_gate, w.w_up};
        float* const gate_up_out[] = {hb_.data(), hb2_.data()};
        kernels::matmul_group(gate_up, gate_up_out, 2, xb, n);
        in_pieces(c.hidden_dim, [&](int first, int count) { kernels::silu_mul(&hb_[size_t(first)], &hb2_[size_t(first)], count); });
        kernels::matmul(w.w_down, hb_.data(), n, xb2_.data());
    }
    if (layers > 0) kernels::add(x, xb2_.data(), n * dim);

    const int rows = int(batch.logit_tokens.size());
    if (rows == 0) return;
    kernels::share_items(false, rows, 1, [&](int r) {
        kernels::rmsnorm(&final_[size_t(r) * dim], &x[size_t(batch.logit_tokens[size_t(r)]) * dim], weights_.final_norm,
                         dim, c.norm_eps);
    });
    kernels::matmul(weights_.lm_head, final_.data(), rows, logits_.data());
}

}  // namespace anvil::engine
