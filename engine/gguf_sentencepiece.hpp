// GGUF's `llama` vocabulary (SentencePiece: tokens, scores, token types) and the SentencePiece-style
// tokenizer.json the engine reads, in both directions.
//
// llama.cpp's SPM tokenizer merges, among adjacent symbols whose concatenation is a token, the one
// whose token scores highest (leftmost on a tie). Written as BPE merges that is: every split of a
// token into two tokens is a merge, ranked by the token's score, ties sharing a rank so that the
// merge loop's leftmost-first rule breaks them as llama.cpp does. Going the other way, a token's
// score is minus the rank of the first merge that makes it, so llama.cpp merges in the order the
// tokenizer.json lists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil::engine {

// GGUF token types (llama.cpp's llama_token_type).
enum GgufTokenType { kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3, kTokenUserDefined = 4, kTokenUnused = 5, kTokenByte = 6 };

struct SentencePieceVocab {
    std::vector<std::string> tokens;  // id -> text, spaces as U+2581, bytes as <0xXX>
    std::vector<float> scores;
    std::vector<int32_t> types;  // GgufTokenType
    std::optional<int32_t> unknown;
    bool add_space_prefix = true;  // a metaspace before text that does not follow an added token
};

// tokenizer.json's model, added_tokens, normalizer, pre_tokenizer and decoder for the vocabulary
// (no post_processor: the caller adds BOS/EOS as the file says). Expects tokens, scores and types
// of one length.
nlohmann::json sentencepiece_tokenizer_json(const SentencePieceVocab& vocab);

// A SentencePiece-style tokenizer.json as GGUF's llama vocabulary of `vocab_size` tokens (ids no
// token names are unused padding); scores from the merge ranks as above. `add_space_prefix` is the
// tokenizer's own (Tokenizer::adds_space_prefix).
SentencePieceVocab sentencepiece_vocab_from_json(const nlohmann::json& doc, int vocab_size, bool add_space_prefix,
                                                 const std::string& label);

}  // namespace anvil::engine
