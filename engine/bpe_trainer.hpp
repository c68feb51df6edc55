// Learns byte-level BPE merges from a text: what make-model uses to give its test models a real,
// deterministic tokenizer.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/pretokenizer.hpp"

namespace anvil::engine {

struct BpeVocabulary {
    std::vector<std::string> tokens;  // id -> byte-mapped text: the 256 byte tokens, then one per merge
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

// Repeatedly merges the most frequent adjacent pair within the pre-tokenized words (ties go to
// the pair whose texts sort first), up to `merges` times or until no pair occurs twice.
BpeVocabulary train_bpe(const std::string& corpus, SplitPattern pattern, int merges);

}  // namespace anvil::engine
