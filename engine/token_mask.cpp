#include "engine/token_mask.hpp"

#include <algorithm>

namespace anvil::engine {

size_t TokenMask::count() const {
    size_t n = 0;
    for (uint64_t w : bits) n += size_t(__builtin_popcountll(w));
    return n;
}

namespace {
// Whole UTF-8 characters (shortest form, no surrogates), none of them a quote, a backslash or a
// control character: text a JSON string takes as it is.
bool plain_string_text(const std::string& bytes, const JsonMatcher& in_string) {
    JsonMatcher probe = in_string;
    for (unsigned char c : bytes) {
        if (c == '"' || c == '\\' || !probe.feed(c)) return false;
    }
    return probe.in_plain_string();
}
}  // namespace

VocabularyTrie::Trie VocabularyTrie::build(std::vector<std::pair<std::string, int32_t>> entries) {
    std::sort(entries.begin(), entries.end());
    Trie t;
    // The path of nodes from the root to the previous entry's last byte.
    std::vector<uint32_t> path;
    for (size_t i = 0; i < entries.size(); ++i) {
        const std::string& bytes = entries[i].first;
        size_t common = 0;
        if (i > 0) {
            const std::string& prev = entries[i - 1].first;
            while (common < path.size() && common < bytes.size() && prev[common] == bytes[common]) ++common;
        }
        for (size_t d = common; d < path.size(); ++d) t.nodes[path[d]].end = uint32_t(t.nodes.size());
        path.resize(common);
        for (size_t d = common; d < bytes.size(); ++d) {
            path.push_back(uint32_t(t.nodes.size()));
            t.nodes.push_back({uint8_t(bytes[d]), 0, uint32_t(t.tokens.size()), uint32_t(t.tokens.size())});
        }
        // Sorted, equal bytes are adjacent and end at the same node.
        Node& last = t.nodes[path.back()];
        t.tokens.push_back(entries[i].second);
        last.last_token = uint32_t(t.tokens.size());
        t.longest = std::max(t.longest, bytes.size());
    }
    for (uint32_t node : path) t.nodes[node].end = uint32_t(t.nodes.size());
    return t;
}

VocabularyTrie::VocabularyTrie(const Tokenizer& tokenizer) : vocab_(tokenizer.vocab_size()) {
    std::vector<std::pair<std::string, int32_t>> plain, other;
    plain_mask_.reset(vocab_);
    JsonMatcher in_string(JsonGrammar::from_schema(nlohmann::ordered_json{{"type", "string"}}, "string"));
    in_string.feed('"');
    for (int32_t id = 0; id < vocab_; ++id) {
        const std::string& bytes = tokenizer.token_bytes(id);
        if (bytes.empty() || tokenizer.is_special(id)) continue;
        if (plain_string_text(bytes, in_string)) {
            plain.emplace_back(bytes, id);
            plain_mask_.set(id);
        } else {
            other.emplace_back(bytes, id);
        }
    }
    plain_ = build(std::move(plain));
    other_ = build(std::move(other));
}

void VocabularyTrie::walk(const Trie& trie, uint32_t begin, uint32_t end, size_t depth, TokenMask& mask) {
    for (uint32_t i = begin; i < end;) {
        const Node& n = trie.nodes[i];
        JsonMatcher& next = states_[depth + 1];
        next.assign(states_[depth]);
        if (next.feed(n.byte)) {
            for (uint32_t k = n.first_token; k < n.last_token; ++k) mask.set(trie.tokens[k]);
            if (n.end > i + 1) walk(trie, i + 1, n.end, depth + 1, mask);
        }
        i = n.end;
    }
}

void VocabularyTrie::allowed(const JsonMatcher& matcher, int vocab, TokenMask& mask) {
    mask.reset(vocab);
    if (matcher.done()) return;
    const size_t longest = std::max(plain_.longest, other_.longest);
    if (states_.size() < longest + 1) states_.assign(longest + 1, matcher);
    states_[0] = matcher;
    if (matcher.in_plain_string()) {
        std::copy(plain_mask_.bits.begin(), plain_mask_.bits.begin() + std::min(plain_mask_.bits.size(), mask.bits.size()),
                  mask.bits.begin());
    } else {
        walk(plain_, 0, uint32_t(plain_.nodes.size()), 0, mask);
    }
    walk(other_, 0, uint32_t(other_.nodes.size()), 0, mask);
}

}  // namespace anvil::engine
