#include "engine/gguf_sentencepiece.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

#include "engine/tokenizer.hpp"
#include "engine/unicode.hpp"

namespace anvil::engine {

using nlohmann::json;

namespace {
constexpr size_t kLongestMergedToken = 1024;  // bytes; longer tokens are only ever matched whole
}  // namespace

json sentencepiece_tokenizer_json(const SentencePieceVocab& v) {
    const size_t n = v.tokens.size();
    // llama.cpp maps a text to the last id that has it.
    std::unordered_map<std::string, int32_t> ids;
    for (size_t id = 0; id < n; ++id) ids[v.tokens[id]] = int32_t(id);
    json vocab = json::object();
    for (const auto& [text, id] : ids) vocab[text] = id;

    // Ranks: tokens by score, highest first; equal scores share a rank.
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v.scores[size_t(a)] > v.scores[size_t(b)]; });
    struct Merge {
        int32_t rank;
        int32_t token;
        size_t split;
    };
    std::vector<Merge> merges;
    int32_t rank = -1;
    for (size_t i = 0; i < n; ++i) {
        const int32_t id = order[i];
        if (i == 0 || v.scores[size_t(id)] != v.scores[size_t(order[i - 1])]) ++rank;
        const std::string& text = v.tokens[size_t(id)];
        if (ids.at(text) != id) continue;  // a duplicate text: the map's id is the one merges make
        // Splitting is quadratic in a token's length; real vocabularies' longest are tens of bytes.
        if (text.size() > kLongestMergedToken) continue;
        for (const Codepoint& cp : decode_utf8(text)) {
            if (cp.offset == 0) continue;
            if (ids.count(text.substr(0, cp.offset)) && ids.count(text.substr(cp.offset))) merges.push_back({rank, id, cp.offset});
        }
    }
    // Listed in rank order, the merges of one rank keep their relative order: the tokenizer gives
    // list position as rank, so equal scores must map to equal ranks. The BPE reader takes ranks
    // from positions, hence `merge_ranks` beside the list (see Tokenizer).
    json merge_list = json::array();
    json merge_ranks = json::array();
    for (const Merge& m : merges) {
        const std::string& text = v.tokens[size_t(m.token)];
        merge_list.push_back(json::array({text.substr(0, m.split), text.substr(m.split)}));
        merge_ranks.push_back(m.rank);
    }

    json added = json::array();
    bool all_bytes = true;
    for (int b = 0; b < 256; ++b) all_bytes = all_bytes && ids.count(byte_token_name(uint8_t(b)));
    for (size_t id = 0; id < n; ++id) {
        const int32_t type = v.types[id];
        // llama.cpp matches these in the text before tokenizing it (with parse_special).
        if (type == kTokenControl || type == kTokenUserDefined || type == kTokenUnknown)
            added.push_back({{"id", id}, {"content", v.tokens[id]}, {"special", type != kTokenUserDefined}});
    }
    const std::string meta(kMetaspace);
    json normalizers = json::array();
    if (v.add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", meta}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}});
    json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}}});
    if (v.add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    json model = {{"type", "BPE"},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(merge_list)},
                  {"merge_ranks", std::move(merge_ranks)},
                  {"byte_fallback", all_bytes},
                  {"fuse_unk", true}};
    if (v.unknown) model["unk_token"] = v.tokens[size_t(*v.unknown)];
    return {{"model", std::move(model)},
            {"added_tokens", std::move(added)},
            {"normalizer", {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}}},
            {"pre_tokenizer", nullptr},
            {"decoder", {{"type", "Sequence"}, {"decoders", std::move(decoders)}}}};
}

SentencePieceVocab sentencepiece_vocab_from_json(const json& doc, int vocab_size, bool add_space_prefix, const std::string& label) {
    auto fail = [&](const std::string& what) { return std::runtime_error(label + ": " + what); };
    SentencePieceVocab v;
    v.add_space_prefix = add_space_prefix;
    v.tokens.assign(size_t(vocab_size), std::string());
    v.types.assign(size_t(vocab_size), kTokenUnused);
    const json& model = doc["model"];
    for (const auto& [text, id] : model["vocab"].items()) {
        const int64_t i = id.get<int64_t>();
        if (i < 0 || i >= vocab_size) throw fail("model.vocab." + text + " is id " + std::to_string(i) + ", outside vocab_size");
        v.tokens[size_t(i)] = text;
        v.types[size_t(i)] = byte_token_value(text) >= 0 && model.value("byte_fallback", false) ? kTokenByte : kTokenNormal;
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        const std::string unk = model["unk_token"];
        if (model["vocab"].contains(unk)) {
            v.unknown = model["vocab"][unk].get<int32_t>();
            v.types[size_t(*v.unknown)] = kTokenUnknown;
        }
    }
    for (const auto& added : doc.value("added_tokens", json::array())) {
        const int64_t i = added["id"].get<int64_t>();
        if (i < 0 || i >= vocab_size) throw fail("added_tokens holds id " + std::to_string(i) + ", outside vocab_size");
        v.tokens[size_t(i)] = added["content"].get<std::string>();
        if (v.unknown && i == *v.unknown) continue;
        v.types[size_t(i)] = added.value("special", false) ? kTokenControl : kTokenUserDefined;
    }
    for (size_t i = 0; i < v.tokens.size(); ++i)
        if (v.types[i] == kTokenUnused) v.tokens[i] = "[PAD" + std::to_string(i) + "]";

    // A token's score: minus the rank of the first merge that makes it; the rest score below
    // every merge, so that llama.cpp forms them last if at all.
    const json merges = model.value("merges", json::array());
    const float lowest = -float(merges.size()) - 1.0f;
    v.scores.assign(size_t(vocab_size), lowest);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const json& m = merges[rank];
        std::string joined;
        if (m.is_string()) {
            const std::string s = m;
            const size_t space = s.find(' ', 1);
            joined = s.substr(0, space) + (space == std::string::npos ? "" : s.substr(space + 1));
        } else {
            joined = m[0].get<std::string>() + m[1].get<std::string>();
        }
        const auto it = model["vocab"].find(joined);
        if (it == model["vocab"].end()) continue;
        float& score = v.scores[size_t(it->get<int64_t>())];
        score = std::max(score, -float(rank));
    }
    return v;
}

}  // namespace anvil::engine
