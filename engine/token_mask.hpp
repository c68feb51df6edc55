// Which tokens a JSON matcher accepts next: the vocabulary's bytes as a trie, walked from the
// matcher's state, a subtree dropped at its first byte the grammar refuses. Tokens that are
// plain string text (no quote, backslash or control byte, whole UTF-8 characters) sit in a trie
// of their own: inside a string's text they are all allowed without a walk, which is where an
// answer spends most of its tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/json_grammar.hpp"
#include "engine/tokenizer.hpp"

namespace anvil::engine {

// One bit per token id.
struct TokenMask {
    std::vector<uint64_t> bits;
    void reset(int vocab) { bits.assign(size_t(vocab + 63) / 64, 0); }
    void set(int32_t t) { bits[size_t(t) >> 6] |= uint64_t(1) << (t & 63); }
    bool test(int32_t t) const { return (bits[size_t(t) >> 6] >> (t & 63)) & 1; }
    size_t count() const;
};

class VocabularyTrie {
public:
    // Special tokens and tokens without bytes are left out: a constrained answer is text.
    explicit VocabularyTrie(const Tokenizer& tokenizer);

    // Sets in `mask` (sized for `vocab` ids) every token whose bytes `matcher` accepts.
    void allowed(const JsonMatcher& matcher, int vocab, TokenMask& mask);

    size_t nodes() const { return plain_.nodes.size() + other_.nodes.size(); }

private:
    struct Node {
        uint8_t byte;
        uint32_t end;          // one past its subtree, in preorder
        uint32_t first_token;  // its tokens (those whose bytes end here) in `tokens`
        uint32_t last_token;
    };
    struct Trie {
        std::vector<Node> nodes;  // preorder; the root is implicit
        std::vector<int32_t> tokens;
        size_t longest = 0;
    };
    static Trie build(std::vector<std::pair<std::string, int32_t>> entries);
    void walk(const Trie& trie, uint32_t begin, uint32_t end, size_t depth, TokenMask& mask);

    Trie plain_, other_;
    TokenMask plain_mask_;
    int vocab_ = 0;
    std::vector<JsonMatcher> states_;  // [depth]: the matcher after the bytes of the path walked so far
};

}  // namespace anvil::engine
