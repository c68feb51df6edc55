#include "engine/cuda_model_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/ops.hpp"

namespace anvil::engine {

namespace cuda = kernels::cuda;
using kernels::WeightType;

namespace {

constexpr double kGiB = double(size_t(1) << 30);

bool multiplied_on_device(WeightType type) {
    return type == WeightType::F32 || type == WeightType::BF16 || type == WeightType::Q8;
}

}  // namespace

CudaModelRunner::CudaModelRunner(int device, const ModelConfig& config, const ModelWeights& weights,
                                 const RunnerOptions& options, const Runner* weights_of)
    : config_(config), options_(options) {
    if (options.max_batch_tokens <= 0 || options.max_logit_rows <= 0 || options.max_context <= 0 ||
        options.kv_blocks < 0 || options.block_size <= 0)
        throw std::invalid_argument("runner options must all be positive");
    if (!(options.memory_fraction > 0.0 && options.memory_fraction <= 1.0))
        throw std::invalid_argument("the GPU memory fraction must be above 0 and at most 1, not " +
                                    std::to_string(options.memory_fraction));
    if (config.head_dim > cuda::kMaxHeadDim)
        throw std::runtime_error("--device cuda: head_dim " + std::to_string(config.head_dim) +
                                 " is above the CUDA attention kernel's " + std::to_string(cuda::kMaxHeadDim));
    const WeightType held = weights.layers.empty() ? weights.lm_head.type : weights.layers.front().wq.type;
    for (const WeightType type : {weights.embedding.type, weights.lm_head.type, held})
        if (!multiplied_on_device(type))
            throw std::runtime_error(std::string("--device cuda multiplies f32, bf16 and q8 weights; this model's are held as ") +
                                     kernels::weight_type_name(type) + ": serve it with --weights bf16 or --weights q8");

    context_ = std::make_unique<cuda::Context>(device);
    const cuda::DeviceInfo info = cuda::device_info(device);
    device_name_ = "cuda:" + std::to_string(device) + " (" + info.name + ")";
    if (weights_of) {
        const auto* other = dynamic_cast<const CudaModelRunner*>(weights_of);
        if (!other || other->model_->device != device || other->model_->source != &weights)
            throw std::logic_error("a GPU runner shares the weights of a runner on the same device made from the same weights");
        model_ = other->model_;
        owns_model_ = false;
    } else {
        model_ = upload_weights(weights);
    }

    const int half = config.head_dim / 2;
    const auto inverse = rope_inverse_frequencies(config);
    std::vector<float> cos(size_t(options.max_context) * half), sin(cos.size());
    for (int p = 0; p < options.max_context; ++p)
        for (int i = 0; i < half; ++i) {
            const double angle = double(p) * inverse[size_t(i)];
            cos[size_t(p) * half + i] = float(std::cos(angle));
            sin[size_t(p) * half + i] = float(std::sin(angle));
        }
    rope_cos_ = cuda::DeviceArray<float>(cos);
    rope_sin_ = cuda::DeviceArray<float>(sin);

    const size_t n = size_t(options.max_batch_tokens), rows = size_t(options.max_logit_rows);
    const ModelConfig& c = config;
    x_ = cuda::DeviceArray<float>(n * c.dim);
    xb_ = cuda::DeviceArray<float>(n * c.dim);
    xb2_ = cuda::DeviceArray<float>(n * c.dim);
    q_ = cuda::DeviceArray<float>(n * c.q_dim());
    k_ = cuda::DeviceArray<float>(n * c.kv_dim());
    v_ = cuda::DeviceArray<float>(n * c.kv_dim());
    att_ = cuda::DeviceArray<float>(n * c.q_dim());
    hb_ = cuda::DeviceArray<float>(n * c.hidden_dim);
    hb2_ = cuda::DeviceArray<float>(n * c.hidden_dim);
    final_ = cuda::DeviceArray<float>(rows * c.dim);
    logits_ = cuda::DeviceArray<float>(rows * c.vocab_size);
    logits_host_ = cuda::PinnedArray<float>(rows * c.vocab_size);
    max_blocks_ = (options.max_context + options.block_size - 1) / options.block_size;
    const size_t index_count = 3 * n + rows + n * size_t(max_blocks_);
    indices_ = cuda::DeviceArray<int32_t>(index_count);
    indices_host_ = cuda::PinnedArray<int32_t>(index_count);
    argmax_ = cuda::DeviceArray<int32_t>(rows);
    argmax_host_ = cuda::PinnedArray<int32_t>(rows);
    table_blocks_.reserve(n);
    // cuBLAS's bf16 copies of a prefill chunk's activations: reserved now, so that no pass allocates
    // (a graph's capture must not).
    context_->reserve_scratch(std::max(n, rows) * size_t(std::max({c.dim, c.q_dim(), c.hidden_dim})) * sizeof(uint16_t));
    // As runner.hpp models it, so that an engine can leave a draft's share out of its target's.
    working_bytes_ = device_working_bytes(config, options);
    allocate_cache();
}

CudaModelRunner::~CudaModelRunner() {
    graphs_.clear();
    if (context_) {
        try {
            context_->synchronize();
        } catch (const std::exception& e) {
            spdlog::warn("{}: {}", device_name_, e.what());
        }
    }
}

std::shared_ptr<const CudaModelRunner::DeviceModel> CudaModelRunner::upload_weights(const ModelWeights& weights) const {
    auto model = std::make_shared<DeviceModel>();
    model->source = &weights;
    model->device = context_->device();
    const size_t total = device_weight_bytes(config_, weights);
    spdlog::info("{}: uploading {:.2f} GB of {} weights", device_name_, double(total) / 1e9,
                 kernels::weight_type_name(weights.layers.empty() ? weights.lm_head.type : weights.layers.front().wq.type));
    const auto started = std::chrono::steady_clock::now();
    cuda::StagedUploader uploader(*context_);
    size_t next_report = size_t(1) << 30;
    auto matrix = [&](const kernels::WeightMatrix& host) {
        model->matrices.push_back(std::make_unique<cuda::DeviceWeights>(host, &uploader));
        model->bytes += model->matrices.back()->bytes();
        if (uploader.uploaded_bytes() >= next_report) {
            spdlog::info("{}: {:.1f} of {:.1f} GB up", device_name_, double(uploader.uploaded_bytes()) / 1e9, double(total) / 1e9);
            next_report = uploader.uploaded_bytes() + (size_t(1) << 30);
        }
        return model->matrices.back()->view();
    };
    auto vector = [&](const float* host, int count) -> const float* {
        if (!host) return nullptr;
        model->vectors.emplace_back(size_t(count));
        uploader.upload(model->vectors.back().data(), host, size_t(count) * sizeof(float));
        model->bytes += size_t(count) * sizeof(float);
        return model->vectors.back().data();
    };
    const ModelConfig& c = config_;
    const bool tied = weights.lm_head.data == weights.embedding.data;
    model->embedding = matrix(weights.embedding);
    model->lm_head = tied ? model->embedding : matrix(weights.lm_head);
    model->final_norm = vector(weights.final_norm, c.dim);
    model->layers.reserve(weights.layers.size());
    for (const LayerWeights& w : weights.layers) {
        Layer l;
        l.attn_norm = vector(w.attn_norm, c.dim);
        l.ffn_norm = vector(w.ffn_norm, c.dim);
        l.bq = vector(w.bq, c.q_dim());
        l.bk = vector(w.bk, c.kv_dim());
        l.bv = vector(w.bv, c.kv_dim());
        l.q_norm = vector(w.q_norm, c.head_dim);
        l.k_norm = vector(w.k_norm, c.head_dim);
        l.wq = matrix(w.wq);
        l.wk = matrix(w.wk);
        l.wv = matrix(w.wv);
        l.wo = matrix(w.wo);
        l.w_gate = matrix(w.w_gate);
        l.w_up = matrix(w.w_up);
        l.w_down = matrix(w.w_down);
        model->layers.push_back(l);
    }
    uploader.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    spdlog::info("{}: weights up, {:.2f} GB in {:.1f} s ({:.1f} GB/s)", device_name_, double(model->bytes) / 1e9, seconds,
                 seconds > 0 ? double(model->bytes) / 1e9 / seconds : 0.0);
    return model;
}

void CudaModelRunner::allocate_cache() {
    const ModelConfig& c = config_;
    const size_t element = options_.kv_type == kernels::KvType::BF16 ? 2 : 4;
    const size_t block_bytes = size_t(options_.block_size) * size_t(c.kv_dim()) * element;  // keys of one layer's block
    // Keys and values of every layer, per block, with the companion's (a draft's cache has the same blocks).
    const size_t per_block = device_block_bytes(c, options_) + options_.companion_block_bytes;
    const int one_context = max_blocks_ + 1;
    const cuda::DeviceMemory memory = cuda::device_memory(context_->device());
    if (options_.kv_blocks == 0) {
        const double allowed = options_.memory_fraction * double(memory.total);
        const double used = double(memory.total - memory.free);
        // The allocations so far are in `used`; the headroom and the companion are still to come.
        const double room = allowed - used - double(kDeviceHeadroomBytes) - double(options_.companion_bytes);
        const size_t blocks = room > 0 ? size_t(room / double(per_block)) : 0;
        if (blocks < size_t(one_context))
            throw std::runtime_error(fmt::format(
                "{}: {:.2f} of its {:.1f} GiB leaves {:.2f} GiB for the KV cache with {:.2f} GiB in use (weights {:.2f} GiB){}, "
                "less than one context of {} tokens needs ({:.2f} GiB): raise --gpu-memory-utilization or lower --max-context",
                device_name_, options_.memory_fraction, double(memory.total) / kGiB, std::max(room, 0.0) / kGiB, used / kGiB,
                double(model_->bytes) / kGiB,
                options_.companion_bytes > 0 ? fmt::format(" and {:.2f} GiB kept for the draft", double(options_.companion_bytes) / kGiB)
                                             : std::string(),
                options_.max_context, double(per_block) * one_context / kGiB));
        options_.kv_blocks = int(std::min<size_t>(blocks, size_t(std::numeric_limits<int>::max() / 2)));
    }
    layer_kv_bytes_ = size_t(options_.kv_blocks) * block_bytes;
    keys_ = cuda::DeviceArray<uint8_t>(layer_kv_bytes_ * size_t(c.n_layers));
    values_ = cuda::DeviceArray<uint8_t>(layer_kv_bytes_ * size_t(c.n_layers));
    kv_bytes_ = keys_.bytes() + values_.bytes();
    spdlog::info("{}: weights {:.2f} GiB{}, KV cache {:.2f} GiB ({} blocks of {}: {} tokens), {:.0f}% of {:.1f} GiB allowed",
                 device_name_, double(model_->bytes) / kGiB, owns_model_ ? "" : " (shared)", double(kv_bytes_) / kGiB, options_.kv_blocks,
                 options_.block_size, size_t(options_.kv_blocks) * size_t(options_.block_size),
                 options_.memory_fraction * 100.0, double(memory.total) / kGiB);
}

kernels::PagedKv CudaModelRunner::layer_kv(int layer) const {
    kernels::PagedKv kv;
    kv.type = options_.kv_type;
    kv.keys = keys_.data() + size_t(layer) * layer_kv_bytes_;
    kv.values = values_.data() + size_t(layer) * layer_kv_bytes_;
    kv.block_size = options_.block_size;
    kv.kv_heads = config_.n_kv_heads;
    kv.head_dim = config_.head_dim;
    kv.layout = kernels::KvLayout::SlotMajor;
    return kv;
}

void CudaModelRunner::forward(const Batch& batch, int exit_after) {
    check_batch(batch, config_, options_);
    if (exit_after < 0 || exit_after > config_.n_layers) throw std::logic_error("early exit after a layer the model lacks");
    const int n = batch.size(), rows = int(batch.logit_tokens.size());
    const int sequences = int(batch.block_tables.size());
    const size_t T = size_t(options_.max_batch_tokens), R = size_t(options_.max_logit_rows);
    if (sequences > options_.max_batch_tokens)
        throw std::logic_error("batch of " + std::to_string(sequences) + " sequences; the CUDA runner holds tables for " +
                               std::to_string(options_.max_batch_tokens));

    // The batch's integers into pinned memory, laid out as indices_ (the previous step's copy up has
    // finished: every forward ends synchronized).
    int32_t* host = indices_host_.data();
    std::copy(batch.tokens.begin(), batch.tokens.end(), host);
    std::copy(batch.positions.begin(), batch.positions.end(), host + T);
    std::copy(batch.sequence.begin(), batch.sequence.end(), host + 2 * T);
    std::copy(batch.logit_tokens.begin(), batch.logit_tokens.end(), host + 3 * T);
    // Each sequence's table as far as its last position in the batch reaches: attention reads no further.
    table_blocks_.assign(size_t(sequences), 0);
    for (int i = 0; i < n; ++i) {
        int& blocks = table_blocks_[size_t(batch.sequence[size_t(i)])];
        blocks = std::max(blocks, batch.positions[size_t(i)] / options_.block_size + 1);
    }
    int32_t* tables = host + 3 * T + R;
    for (int s = 0; s < sequences; ++s)
        std::copy_n(batch.block_tables[size_t(s)], table_blocks_[size_t(s)], tables + size_t(s) * size_t(max_blocks_));
    cuda::copy_to_device_async(*context_, indices_.data(), host,
                               (3 * T + R + size_t(sequences) * size_t(max_blocks_)) * sizeof(int32_t));

    const int layers = exit_after > 0 ? exit_after : config_.n_layers;
    if (n <= kGraphTokens) {
        auto& graph = graphs_[{n, rows, layers}];
        if (!graph) graph = std::make_unique<cuda::Graph>(*context_, [&] { enqueue(n, rows, layers); });
        graph->launch();
    } else {
        enqueue(n, rows, layers);
    }
    copy_back(batch);
    context_->synchronize();
}

void CudaModelRunner::copy_back(const Batch& batch) {
    const int rows = int(batch.logit_tokens.size());
    if (rows == 0) return;
    cuda::copy_to_host_async(*context_, argmax_host_.data(), argmax_.data(), size_t(rows) * sizeof(int32_t));
    const size_t row_bytes = size_t(config_.vocab_size) * sizeof(float);
    if (batch.largest_only.empty()) {
        cuda::copy_to_host_async(*context_, logits_host_.data(), logits_.data(), size_t(rows) * row_bytes);
        return;
    }
    // The wanted rows, one copy per run of them.
    for (int first = 0; first < rows;) {
        if (batch.largest_only[size_t(first)]) {
            ++first;
            continue;
        }
        int end = first + 1;
        while (end < rows && !batch.largest_only[size_t(end)]) ++end;
        const size_t offset = size_t(first) * size_t(config_.vocab_size);
        cuda::copy_to_host_async(*context_, logits_host_.data() + offset, logits_.data() + offset, size_t(end - first) * row_bytes);
        first = end;
    }
}

void CudaModelRunner::enqueue(int n, int logit_rows, int layers) {
    cuda::Context& cx = *context_;
    const ModelConfig& c = config_;
    const int dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
    const size_t T = size_t(options_.max_batch_tokens);
    const int32_t* tokens = indices_.data();
    const int32_t* positions = tokens + T;
    cuda::KvBatch kv_batch;
    kv_batch.positions = positions;
    kv_batch.sequence = tokens + 2 * T;
    kv_batch.block_tables = tokens + 3 * T + size_t(options_.max_logit_rows);
    kv_batch.max_blocks = max_blocks_;
    const int32_t* logit_rows_at = tokens + 3 * T;
    const float scale = 1.0f / std::sqrt(float(hd));
    const size_t tokens_dim = size_t(n) * size_t(dim);

    const DeviceModel& m = *model_;
    cuda::embedding(cx, m.embedding, tokens, n, x_.data());
    for (int l = 0; l < layers; ++l) {
        const Layer& w = m.layers[size_t(l)];
        // The previous layer's feed-forward output joins the residual stream here, as on the CPU.
        if (l > 0) cuda::add(cx, x_.data(), xb2_.data(), tokens_dim);
        cuda::rmsnorm(cx, xb_.data(), x_.data(), w.attn_norm, n, dim, c.norm_eps);
        cuda::matmul(cx, w.wq, xb_.data(), n, q_.data());
        cuda::matmul(cx, w.wk, xb_.data(), n, k_.data());
        cuda::matmul(cx, w.wv, xb_.data(), n, v_.data());
        if (w.bq) {
            cuda::add_bias(cx, q_.data(), w.bq, n, q_dim);
            cuda::add_bias(cx, k_.data(), w.bk, n, kv_dim);
            cuda::add_bias(cx, v_.data(), w.bv, n, kv_dim);
        }
        if (w.q_norm) {
            cuda::rmsnorm(cx, q_.data(), q_.data(), w.q_norm, n * c.n_heads, hd, c.norm_eps);
            cuda::rmsnorm(cx, k_.data(), k_.data(), w.k_norm, n * c.n_kv_heads, hd, c.norm_eps);
        }
        cuda::rope(cx, q_.data(), n, q_dim, c.n_heads, hd, positions, rope_cos_.data(), rope_sin_.data(), c.rope_pairs);
        cuda::rope(cx, k_.data(), n, kv_dim, c.n_kv_heads, hd, positions, rope_cos_.data(), rope_sin_.data(), c.rope_pairs);
        const kernels::PagedKv kv = layer_kv(l);
        cuda::kv_write(cx, kv, keys_.data() + size_t(l) * layer_kv_bytes_, values_.data() + size_t(l) * layer_kv_bytes_,
                       k_.data(), v_.data(), n, kv_batch);
        cuda::attention(cx, q_.data(), kv, n, c.n_heads, kv_batch, c.sliding_window, scale, att_.data());
        cuda::matmul(cx, w.wo, att_.data(), n, xb2_.data());
        cuda::add(cx, x_.data(), xb2_.data(), tokens_dim);
        cuda::rmsnorm(cx, xb_.data(), x_.data(), w.ffn_norm, n, dim, c.norm_eps);
        cuda::matmul(cx, w.w_gate, xb_.data(), n, hb_.data());
        cuda::matmul(cx, w.w_up, xb_.data(), n, hb2_.data());
        cuda::silu_mul(cx, hb_.data(), hb2_.data(), size_t(n) * size_t(c.hidden_dim));
        cuda::matmul(cx, w.w_down, hb_.data(), n, xb2_.data());
    }
    if (layers > 0) cuda::add(cx, x_.data(), xb2_.data(), tokens_dim);
    if (logit_rows == 0) return;
    cuda::rmsnorm(cx, final_.data(), x_.data(), m.final_norm, logit_rows, dim, c.norm_eps, logit_rows_at);
    cuda::matmul(cx, m.lm_head, final_.data(), logit_rows, logits_.data());
    cuda::argmax(cx, logits_.data(), logit_rows, c.vocab_size, argmax_.data());
}

}  // namespace anvil::engine
