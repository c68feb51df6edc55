// What proposes the tokens a speculative step verifies: the draft's kind and options, the check
// that a draft model speaks the target's tokenizer, and prompt lookup (the draft without a model).
// The engine runs the model drafts itself (speculator.cpp); the rule that accepts or
// corrects their tokens is speculative_rule.*.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/weights.hpp"

namespace anvil::engine {

enum class DraftKind {
    None,
    Self,    // the target's own weights in a cheaper format (--draft-self q8|bf16)
    Model,   // a second, smaller model with the same tokenizer (--draft-model DIR)
    Layers,  // the target's first N layers, its final norm and LM head: early exit (--draft-layers N)
    Ngram,   // prompt lookup in the sequence's own tokens (--draft-ngram N)
};
const char* draft_kind_name(DraftKind kind);

constexpr int kMaxDraftTokens = 16;

struct DraftOptions {
    DraftKind kind = DraftKind::None;
    WeightFormat weights = WeightFormat::Stored;  // Self: q8 or bf16; Model: its format
    std::filesystem::path model_dir;              // Model
    int layers = 0;                               // Layers: N
    int ngram = 0;                                // Ngram: N
    int tokens = 4;                               // K: tokens proposed per step

    // Throws std::invalid_argument naming the flag when the options do not make one draft.
    void validate(int target_layers) const;
    // What GET /v1/models says about the draft: {"kind", "tokens", and the kind's own fields}.
    nlohmann::json describe() const;
};

// Throws std::runtime_error naming the first difference unless the two model directories'
// tokenizer.json files define the same vocabulary, merges and added tokens: a draft proposes
// token ids, and they must mean the same text to the target.
void require_same_tokenizer(const std::filesystem::path& target_dir, const std::filesystem::path& draft_dir);

// Prompt lookup: finds the latest earlier occurrence of the last `n` tokens of `tokens` and
// appends to `out` up to `k` of the tokens that followed it. Nothing when there is no match.
void propose_ngram(const std::vector<int32_t>& tokens, int n, int k, std::vector<int32_t>& out);

}  // namespace anvil::engine
