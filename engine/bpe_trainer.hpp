// Learns BPE merges from a text: what make-model uses to give its test models a real,
// deterministic tokenizer, byte-level (GPT-2, Llama 3, Qwen) or SentencePiece-style (Mistral 7B).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/pretokenizer.hpp"

namespace anvil::engine {

struct BpeVocabulary {
    std::vector<std::string> tokens;  // id -> token text: the initial symbols, then one per new merged text
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

// Repeatedly merges the most frequent adjacent pair within the pre-tokenized words (ties go to
// the pair whose texts sort first), up to `merges` times or until no pair occurs twice. Tokens are
// the 256 byte tokens in the GPT-2 mapping, then the merged ones.
BpeVocabulary train_bpe(const std::string& corpus, SplitPattern pattern, int merges);

// The same over SentencePiece-style words: each line of the corpus with a leading metaspace and
// its spaces written as the metaspace, split before every run of metaspaces, symbols the
// characters. Tokens are the 256 <0xXX> byte tokens, the corpus's characters in code point order,
// then the merged ones; other characters fall back to bytes.
BpeVocabulary train_sentencepiece_bpe(const std::string& corpus, int merges);

}  // namespace anvil::engine
