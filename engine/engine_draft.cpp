// Loading a draft for speculative decoding: its config and weights beside the target's (a self
// draft in the target's own format is the target's tensors), its runner's options, and the
// speculator (speculator.hpp) that drafts and verifies with them.
#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "engine/engine.hpp"
#include "engine/speculative_rule.hpp"

namespace anvil::engine {

void Engine::read_draft(const std::filesystem::path& model_dir, const ModelWeights& target) {
    const DraftOptions& d = options_.draft;
    if (d.kind != DraftKind::Self && d.kind != DraftKind::Model) return;
    const ModelConfig* config = &config_;
    std::filesystem::path dir = model_dir;
    if (d.kind == DraftKind::Model) {
        require_same_tokenizer(model_dir, d.model_dir);
        draft_config_ = load_config(d.model_dir);
        if (draft_config_->vocab_size != config_.vocab_size)
            throw std::runtime_error("--draft-model " + d.model_dir.string() + ": vocab_size " +
                                     std::to_string(draft_config_->vocab_size) + ", the target's is " +
                                     std::to_string(config_.vocab_size) + "; their logits must cover the same tokens");
        if (draft_config_->max_position < options_.max_context)
            throw std::runtime_error("--draft-model " + d.model_dir.string() + ": context length " +
                                     std::to_string(draft_config_->max_position) + " is below --max-context " +
                                     std::to_string(options_.max_context));
        config = &*draft_config_;
        dir = d.model_dir;
    }
    // A self draft held as the target is held is the target's tensors: it runs on them, nothing
    // copied, on the CPU and on a GPU alike (as the paper's memory counts it,
    // registry/embedded_memory.cpp). That is the same --weights, the stored bf16 values kept by
    // both, or q8 from a GGUF Q8_0 file that is q8 already.
    using kernels::WeightType;
    const WeightType held = target.layers.front().wq.type;
    const bool q8_held = held == WeightType::Q8 || held == WeightType::Q8Packed || held == WeightType::Q8Packed8;
    draft_shares_weights_ = d.kind == DraftKind::Self &&
                            (d.weights == options_.weights || (d.weights == WeightFormat::Q8 && q8_held) ||
                             (d.weights == WeightFormat::BF16 && held == WeightType::BF16 && target.kept_as_stored()));
    if (!draft_shares_weights_)
        draft_weights_ = std::make_unique<ModelWeights>(*config, dir, d.weights, weight_home(options_.device));
}

RunnerOptions Engine::draft_runner_options(const RunnerOptions& target) const {
    // The draft's cache has the target's blocks, so that one block table serves both.
    RunnerOptions r = target;
    r.max_logit_rows = options_.max_seqs;
    r.companion_bytes = 0;
    r.companion_block_bytes = 0;
    return r;
}

void Engine::start_draft() {
    const DraftOptions& d = options_.draft;
    metrics_.draft_kind = draft_kind_name(d.kind);
    if (d.kind == DraftKind::None) return;
    const Speculator::Limits limits{options_.max_seqs, options_.max_batch_tokens, options_.max_context, config_.vocab_size};
    if (d.kind == DraftKind::Layers || d.kind == DraftKind::Ngram) {
        spdlog::info("draft: {} {}, {} tokens a step", draft_kind_name(d.kind), d.kind == DraftKind::Layers ? d.layers : d.ngram,
                     d.tokens);
        speculator_ = std::make_unique<Speculator>(d, limits, nullptr, metrics_, sampler_scratch_);
        return;
    }
    const ModelConfig& config = draft_config_ ? *draft_config_ : config_;
    // The target's options hold its resolved block count: the draft's cache takes as many, within
    // the share the target left for it on a GPU.
    auto draft_runner = make_runner(options_.device, config, draft_shares_weights_ ? *weights_ : *draft_weights_,
                                    draft_runner_options(runner_->options()), draft_shares_weights_ ? runner_.get() : nullptr);
    spdlog::info("draft: {} ({} layers, dim {}, {} weights{}, {} MB cache), {} tokens a step", draft_kind_name(d.kind),
                 config.n_layers, config.dim, weight_format_name(d.weights), draft_shares_weights_ ? ", the target's" : "",
                 draft_runner->kv_bytes() >> 20, d.tokens);
    speculator_ = std::make_unique<Speculator>(d, limits, std::move(draft_runner), metrics_, sampler_scratch_);
}

}  // namespace anvil::engine
