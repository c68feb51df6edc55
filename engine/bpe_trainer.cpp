#include "engine/bpe_trainer.hpp"

#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "engine/tokenizer.hpp"
#include "engine/unicode.hpp"

namespace anvil::engine {

namespace {

using Words = std::vector<std::pair<std::vector<std::string>, int>>;  // symbols of each distinct word, its count

void learn_merges(BpeVocabulary& vocab, Words& words, int merges) {
    std::set<std::string> known(vocab.tokens.begin(), vocab.tokens.end());
    for (int m = 0; m < merges; ++m) {
        std::map<std::pair<std::string, std::string>, int> pairs;
        for (const auto& [symbols, count] : words)
            for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
        const std::pair<std::string, std::string>* best = nullptr;
        int best_count = 1;
        for (const auto& [pair, count] : pairs)
            if (count > best_count) best = &pair, best_count = count;
        if (!best) break;
        const auto chosen = *best;
        const std::string joined = chosen.first + chosen.second;
        vocab.merges.push_back(chosen);
        // Two different pairs can spell the same text; the token exists once.
        if (known.insert(joined).second) vocab.tokens.push_back(joined);
        for (auto& [symbols, count] : words) {
            std::vector<std::string> merged;
            for (size_t i = 0; i < symbols.size(); ++i) {
                if (i + 1 < symbols.size() && symbols[i] == chosen.first && symbols[i + 1] == chosen.second) {
                    merged.push_back(joined);
                    ++i;
                } else {
                    merged.push_back(symbols[i]);
                }
            }
            symbols = std::move(merged);
        }
    }
}

}  // namespace

BpeVocabulary train_bpe(const std::string& corpus, SplitPattern pattern, int merges) {
    BpeVocabulary vocab;
    std::vector<std::string> byte_text(256);
    for (int b = 0; b < 256; ++b) {
        append_utf8(byte_text[size_t(b)], byte_to_unicode(uint8_t(b)));
        vocab.tokens.push_back(byte_text[size_t(b)]);
    }
    std::map<std::string, int> counts;
    for (auto piece : pretokenize(corpus, pattern)) ++counts[std::string(piece)];
    Words words;
    for (const auto& [word, count] : counts) {
        std::vector<std::string> symbols;
        for (unsigned char c : word) symbols.push_back(byte_text[c]);
        words.emplace_back(std::move(symbols), count);
    }
    learn_merges(vocab, words, merges);
    return vocab;
}

BpeVocabulary train_sentencepiece_bpe(const std::string& corpus, int merges) {
    BpeVocabulary vocab;
    for (int b = 0; b < 256; ++b) vocab.tokens.push_back(byte_token_name(uint8_t(b)));
    std::map<std::string, int> counts;
    std::set<uint32_t> characters;
    std::istringstream lines(corpus);
    for (std::string line; std::getline(lines, line);) {
        std::string spaced(kMetaspace);
        for (char c : line) spaced += c == ' ' ? std::string(kMetaspace) : std::string(1, c);
        size_t start = 0;
        const size_t width = kMetaspace.size();
        for (size_t at = spaced.find(kMetaspace, width); at != std::string::npos; at = spaced.find(kMetaspace, at + width)) {
            if (spaced.compare(at - width, width, kMetaspace) == 0) continue;
            ++counts[spaced.substr(start, at - start)];
            start = at;
        }
        ++counts[spaced.substr(start)];
    }
    Words words;
    for (const auto& [word, count] : counts) {
        std::vector<std::string> symbols;
        for (const Codepoint& cp : decode_utf8(word)) {
            symbols.push_back(word.substr(cp.offset, cp.length));
            characters.insert(cp.value);
        }
        words.emplace_back(std::move(symbols), count);
    }
    for (uint32_t cp : characters) {
        std::string ch;
        append_utf8(ch, cp);
        vocab.tokens.push_back(ch);
    }
    learn_merges(vocab, words, merges);
    return vocab;
}

}  // namespace anvil::engine
