#include "engine/tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <queue>
#include <stdexcept>

#include "engine/gguf_model.hpp"
#include "engine/json_file.hpp"
#include "engine/unicode.hpp"
#include "engine/unicode_nfc.hpp"

namespace anvil::engine {

using nlohmann::json;

namespace {

struct ByteMap {
    uint32_t to_unicode[256];
    int16_t to_byte[512];
    ByteMap() {
        std::fill(std::begin(to_byte), std::end(to_byte), int16_t(-1));
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_unicode[b] = printable ? uint32_t(b) : uint32_t(256 + extra++);
            to_byte[to_unicode[b]] = int16_t(b);
        }
    }
};
const ByteMap& byte_map() {
    static const ByteMap map;
    return map;
}

std::string mapped_text(std::string_view bytes) {
    std::string out;
    for (unsigned char b : bytes) append_utf8(out, byte_to_unicode(b));
    return out;
}

std::string unmapped_bytes(const std::string& token) {
    std::string out;
    for (const auto& cp : decode_utf8(token)) {
        const int b = unicode_to_byte(cp.value);
        if (b >= 0) out += char(b);
        else append_utf8(out, cp.value);
    }
    return out;
}

std::string token_text(const json& value) {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_object() && value.contains("content") && value["content"].is_string()) return value["content"];
    return {};
}

}  // namespace

uint32_t byte_to_unicode(uint8_t byte) { return byte_map().to_unicode[byte]; }
int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_map().to_byte[cp] : -1; }

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
    if (formats::is_model_file(model_dir)) {
        const GgufModel model(model_dir);
        const auto [doc, config] = model.tokenizer_documents();
        return Tokenizer(doc, config, model_dir.string() + " (its tokenizer.ggml metadata)");
    }
    const auto file = model_dir / "tokenizer.json";
    const auto config_file = model_dir / "tokenizer_config.json";
    const json config = std::filesystem::exists(config_file) ? read_json_file(config_file) : json::object();
    return Tokenizer(read_json_file(file), config, file.string());
}

std::string byte_token_name(uint8_t byte) {
    static const char* const kHex = "0123456789ABCDEF";
    return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
}

int byte_token_value(std::string_view text) {
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
    const int high = hex(text[3]), low = hex(text[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
}

namespace {

bool is_byte_level(const json& pre) {
    if (!pre.is_object()) return false;
    const std::string type = pre.value("type", std::string());
    if (type == "ByteLevel") return true;
    if (type != "Sequence" || !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array()) return false;
    for (const auto& inner : pre["pretokenizers"])
        if (is_byte_level(inner)) return true;
    return false;
}

void replace_all(std::string& text, std::string_view what, std::string_view with) {
    if (what.empty()) return;
    std::string out;
    size_t from = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, from)) {
        out.append(text, from, at - from);
        out += with;
        from = at + what.size();
    }
    if (from == 0) return;
    out.append(text, from);
    text = std::move(out);
}

// A `{"String": s}` pattern's text; Regex patterns are not supported where this is asked.
std::optional<std::string> string_pattern(const json& step) {
    if (!step.contains("pattern") || !step["pattern"].is_object() || !step["pattern"].contains("String") ||
        !step["pattern"]["String"].is_string() || !step.contains("content") || !step["content"].is_string())
        return std::nullopt;
    return step["pattern"]["String"].get<std::string>();
}

}  // namespace

Tokenizer::Tokenizer(const json& doc, const json& config, const std::string& label) : label_(label) {
    try {
        parse(doc, config, label);
    } catch (const json::exception& e) {
        // A value of the wrong type where parse() does not check types itself.
        throw std::runtime_error(label + ": a value has the wrong type (" + e.what() + ")");
    }
}

void Tokenizer::parse(const json& doc, const json& config, const std::string& label) {
    auto fail = [&](const std::string& what) { return std::runtime_error(label + ": " + what); };
    if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object()) throw fail("has no model section");
    const json& model = doc["model"];
    if (model.value("type", std::string("BPE")) != "BPE")
        throw fail("model.type is " + model.value("type", std::string()) + "; anvil-engine reads BPE vocabularies only");
    const json pre = doc.value("pre_tokenizer", json());
    form_ = is_byte_level(pre) ? VocabForm::ByteLevel : VocabForm::SentencePiece;
    if (form_ == VocabForm::ByteLevel && model.value("byte_fallback", false))
        throw fail("model.byte_fallback is set with a ByteLevel pre_tokenizer: byte-level vocabularies need no byte fallback");
    ignore_merges_ = model.value("ignore_merges", false);
    if (!model.contains("vocab") || !model["vocab"].is_object()) throw fail("model.vocab is missing");

    int32_t largest = -1;
    for (const auto& [text, id] : model["vocab"].items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 10'000'000)
            throw fail("model.vocab." + text + " is not a token id");
        vocab_[text] = id.get<int32_t>();
        largest = std::max(largest, id.get<int32_t>());
    }
    const json added = doc.value("added_tokens", json::array());
    for (const auto& a : added) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
            a["id"].get<int64_t>() > 10'000'000 || !a.contains("content") || !a["content"].is_string() ||
            a["content"].get<std::string>().empty())
            throw fail("added_tokens holds an entry without id and content");
        largest = std::max(largest, a["id"].get<int32_t>());
    }
    bytes_.assign(size_t(largest + 1), std::string());
    special_.assign(size_t(largest + 1), false);

    if (doc.contains("normalizer") && !doc["normalizer"].is_null()) parse_normalizer(doc["normalizer"], label);
    if (form_ == VocabForm::ByteLevel) {
        for (const auto& [text, id] : vocab_) bytes_[size_t(id)] = unmapped_bytes(text);
        for (int b = 0; b < 256; ++b) {
            std::string ch;
            append_utf8(ch, byte_to_unicode(uint8_t(b)));
            auto it = vocab_.find(ch);
            if (it == vocab_.end())
                throw fail("the vocabulary lacks the byte-level token for byte " + std::to_string(b) +
                           ": not a byte-level BPE vocabulary");
            byte_tokens_[b] = it->second;
        }
    } else {
        parse_sentencepiece(doc, label);
    }
    for (const auto& a : added) {
        const int32_t id = a["id"];
        const std::string content = a["content"];
        bytes_[size_t(id)] = content;
        special_[size_t(id)] = a.value("special", false);
        added_.push_back({content, id});
    }
    std::stable_sort(added_.begin(), added_.end(),
                     [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });

    const json merges = model.value("merges", json::array());
    if (!merges.is_array()) throw fail("model.merges is not an array");
    // merge_ranks: the GGUF llama vocabulary's merges, where tokens of equal score share a rank
    // (gguf_sentencepiece.hpp); otherwise a merge's rank is its place in the list.
    const json ranks = model.value("merge_ranks", json());
    if (!ranks.is_null() && (!ranks.is_array() || ranks.size() != merges.size()))
        throw fail("model.merge_ranks must hold one rank per merge");
    int32_t rank = 0;
    for (const auto& m : merges) {
        std::string left, right;
        if (m.is_string()) {
            const std::string s = m;
            const size_t space = s.find(' ', 1);
            if (space == std::string::npos) throw fail("merge \"" + s + "\" is not two tokens");
            left = s.substr(0, space);
            right = s.substr(space + 1);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            left = m[0];
            right = m[1];
        } else {
            throw fail("model.merges holds an entry that is neither \"a b\" nor [a, b]");
        }
        auto l = vocab_.find(left), r = vocab_.find(right), joined = vocab_.find(left + right);
        if (l == vocab_.end() || r == vocab_.end() || joined == vocab_.end())
            throw fail("merge \"" + left + " " + right + "\" names tokens missing from the vocabulary");
        const uint64_t key = (uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second);
        const int32_t ranked = ranks.is_null() ? rank : ranks[size_t(rank)].get<int32_t>();
        ++rank;
        merges_.emplace(key, std::make_pair(ranked, joined->second));
    }

    if (form_ == VocabForm::ByteLevel) {
        auto byte_level = [&](const json& p) {
            add_prefix_space_ = p.value("add_prefix_space", false);
            return p.value("use_regex", true);
        };
        if (pre.value("type", std::string()) == "ByteLevel") {
            if (!byte_level(pre)) throw fail("a ByteLevel pre-tokenizer without a split pattern is not supported");
            pattern_ = SplitPattern::Gpt2;
        } else if (pre.value("type", std::string()) == "Sequence" && pre["pretokenizers"].size() == 2 &&
                   pre["pretokenizers"][0].value("type", std::string()) == "Split" &&
                   pre["pretokenizers"][1].value("type", std::string()) == "ByteLevel") {
            const json& split = pre["pretokenizers"][0];
            if (!split.contains("pattern") || !split["pattern"].contains("Regex") || split.value("invert", false) ||
                split.value("behavior", std::string()) != "Isolated")
                throw fail("pre_tokenizer Split must be an isolated, non-inverted Regex");
            pattern_ = split_pattern_from_regex(split["pattern"]["Regex"].get<std::string>());
            if (byte_level(pre["pretokenizers"][1])) throw fail("a Split followed by a regex ByteLevel is not supported");
        } else {
            throw fail("pre_tokenizer must be ByteLevel or Sequence[Split(Regex), ByteLevel]");
        }
    }

    // Tokens the post-processor wraps a single sequence in, e.g. Llama-3's <|begin_of_text|>.
    std::function<void(const json&)> post = [&](const json& p) {
        if (!p.is_object()) return;
        const std::string type = p.value("type", std::string());
        if (type == "Sequence") {
            for (const auto& inner : p.value("processors", json::array())) post(inner);
        } else if (type == "TemplateProcessing") {
            bool after = false;
            for (const auto& item : p.value("single", json::array())) {
                if (item.contains("Sequence")) {
                    after = true;
                } else if (item.contains("SpecialToken")) {
                    const std::string name = item["SpecialToken"].value("id", std::string());
                    const json& specials = p.value("special_tokens", json::object());
                    if (!specials.contains(name) || !specials[name].contains("ids"))
                        throw fail("post_processor names special token " + name + " without ids");
                    for (const auto& id : specials[name]["ids"]) (after ? suffix_ : prefix_).push_back(id.get<int32_t>());
                }
            }
        }
    };
    post(doc.value("post_processor", json()));

    if (config.is_object()) {
        chat_template_ = config.contains("chat_template") && config["chat_template"].is_string()
                             ? config["chat_template"].get<std::string>()
                             : std::string();
        bos_token_ = token_text(config.value("bos_token", json()));
        eos_token_ = token_text(config.value("eos_token", json()));
        if (prefix_.empty() && config.value("add_bos_token", false)) {
            auto bos = token_id(bos_token_);
            if (!bos) throw fail("add_bos_token is set but bos_token \"" + bos_token_ + "\" is not a token");
            prefix_.push_back(*bos);
        }
    }
    for (int32_t id : prefix_)
        if (id < 0 || id >= vocab_size()) throw fail("post-processor token id outside the vocabulary");
    for (int32_t id : suffix_)
        if (id < 0 || id >= vocab_size()) throw fail("post-processor token id outside the vocabulary");
}

void Tokenizer::parse_normalizer(const json& n, const std::string& label) {
    auto fail = [&](const std::string& what) { return std::runtime_error(label + ": " + what); };
    const std::string type = n.is_object() ? n.value("type", std::string("?")) : std::string("?");
    if (type == "NFC") {
        normalizer_.push_back({NormalizeStep::Nfc, {}, {}});
    } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
        for (const auto& inner : n["normalizers"]) parse_normalizer(inner, label);
    } else if (type == "Prepend" && n.contains("prepend") && n["prepend"].is_string()) {
        normalizer_.push_back({NormalizeStep::Prepend, n["prepend"].get<std::string>(), {}});
    } else if (type == "Replace") {
        const auto what = string_pattern(n);
        if (!what) throw fail("normalizer Replace must replace a {\"String\": ...} pattern with a content string");
        normalizer_.push_back({NormalizeStep::Replace, *what, n["content"].get<std::string>()});
    } else {
        throw fail("normalizer " + type + " is not supported (NFC, Prepend and Replace of a string are, alone or in a Sequence)");
    }
}

// The metaspace, where it comes from (normalizer or Metaspace pre-tokenizer), the unknown token,
// byte fallback, and what the decoder does to each token's text.
void Tokenizer::parse_sentencepiece(const json& doc, const std::string& label) {
    auto fail = [&](const std::string& what) { return std::runtime_error(label + ": " + what); };
    const json& model = doc["model"];
    json pre = doc.value("pre_tokenizer", json());
    if (pre.is_object() && pre.value("type", std::string()) == "Sequence" && pre.contains("pretokenizers") &&
        pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 1)
        pre = pre["pretokenizers"][0];
    if (pre.is_object() && pre.value("type", std::string()) == "Metaspace") {
        metaspace_ = true;
        replacement_ = pre.value("replacement", std::string(kMetaspace));
        if (decode_utf8(replacement_).size() != 1) throw fail("pre_tokenizer.replacement must be one character");
        metaspace_split_ = pre.value("split", true);
        if (pre.contains("prepend_scheme")) {
            const std::string scheme = pre.value("prepend_scheme", std::string());
            if (scheme == "always") prepend_ = Prepend::Always;
            else if (scheme == "first") prepend_ = Prepend::First;
            else if (scheme == "never") prepend_ = Prepend::Never;
            else throw fail("pre_tokenizer.prepend_scheme is \"" + scheme + "\": expected always, first or never");
        } else {
            prepend_ = pre.value("add_prefix_space", true) ? Prepend::Always : Prepend::Never;
        }
    } else if (!pre.is_null()) {
        throw fail("pre_tokenizer " + pre.value("type", std::string("?")) +
                   " is not supported: byte-level vocabularies need ByteLevel, SentencePiece-style ones Metaspace or none");
    } else {
        for (const auto& step : normalizer_) {
            if (step.kind == NormalizeStep::Replace && step.what == " ") replacement_ = step.with;
            if (step.kind == NormalizeStep::Prepend) prepend_ = Prepend::Always;
        }
        if (replacement_.empty())
            throw fail("neither a ByteLevel pre_tokenizer, a Metaspace one, nor a normalizer that writes spaces as " +
                       std::string(kMetaspace) + ": not a vocabulary anvil-engine reads");
    }

    const bool byte_fallback = model.value("byte_fallback", false);
    for (int b = 0; b < 256; ++b) {
        auto it = vocab_.find(byte_token_name(uint8_t(b)));
        byte_tokens_[b] = it == vocab_.end() ? -1 : it->second;
        if (byte_fallback && byte_tokens_[b] < 0)
            throw fail("model.byte_fallback is set but the vocabulary lacks " + byte_token_name(uint8_t(b)));
    }
    if (!byte_fallback) std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), -1);
    if (model.contains("unk_token") && !model["unk_token"].is_null()) {
        if (!model["unk_token"].is_string()) throw fail("model.unk_token is not a string");
        auto it = vocab_.find(model["unk_token"].get<std::string>());
        if (it == vocab_.end()) throw fail("model.unk_token \"" + model["unk_token"].get<std::string>() + "\" is not in the vocabulary");
        unk_ = it->second;
    }
    fuse_unk_ = model.value("fuse_unk", false);

    // The decoder: Replace(metaspace -> " "), ByteFallback, Fuse and Strip(" ", n) in a Sequence
    // (Llama 2's), or Metaspace (newer files). Each token's bytes are what it decodes to alone.
    std::vector<std::pair<std::string, std::string>> replaces;
    bool bytes_fall_back = false;
    std::function<void(const json&)> decoder = [&](const json& d) {
        const std::string type = d.is_object() ? d.value("type", std::string("?")) : std::string("?");
        if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array()) {
            for (const auto& inner : d["decoders"]) decoder(inner);
        } else if (type == "Replace") {
            const auto what = string_pattern(d);
            if (!what) throw fail("decoder Replace must replace a {\"String\": ...} pattern with a content string");
            replaces.emplace_back(*what, d["content"].get<std::string>());
        } else if (type == "ByteFallback") {
            bytes_fall_back = true;
        } else if (type == "Fuse") {
        } else if (type == "Strip") {
            if (d.value("content", std::string(" ")) != " " || d.value("stop", 0) != 0)
                throw fail("decoder Strip must strip spaces from the start only");
            strip_leading_spaces_ = d.value("start", size_t(0));
        } else if (type == "Metaspace") {
            replaces.emplace_back(d.value("replacement", std::string(kMetaspace)), " ");
            const bool prepends = d.contains("prepend_scheme") ? d.value("prepend_scheme", std::string()) != "never"
                                                               : d.value("add_prefix_space", true);
            strip_leading_spaces_ = prepends ? 1 : 0;
            bytes_fall_back = true;  // tokenizers' Metaspace decoder leaves <0xXX> alone; nothing else would read it
        } else {
            throw fail("decoder " + type + " is not supported (Replace, ByteFallback, Fuse, Strip and Metaspace are)");
        }
    };
    if (!doc.contains("decoder") || doc["decoder"].is_null())
        throw fail("decoder is missing: a SentencePiece-style vocabulary needs one to turn " + std::string(kMetaspace) +
                   " back into spaces");
    decoder(doc["decoder"]);
    for (const auto& [text, id] : vocab_) {
        const int byte = bytes_fall_back ? byte_token_value(text) : -1;
        if (byte >= 0) {
            bytes_[size_t(id)] = std::string(1, char(byte));
            continue;
        }
        std::string bytes = text;
        for (const auto& [what, with] : replaces) replace_all(bytes, what, with);
        bytes_[size_t(id)] = std::move(bytes);
    }
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
    for (const auto& a : added_)
        if (a.content == content) return a.id;
    auto it = vocab_.find(form_ == VocabForm::ByteLevel ? mapped_text(content) : std::string(content));
    if (it != vocab_.end()) return it->second;
    return std::nullopt;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    static const std::string empty;
    return id >= 0 && id < vocab_size() ? bytes_[size_t(id)] : empty;
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[size_t(id)]; }

// Applies merges by rank, leftmost first among equal ranks, until none applies. Symbols are a
// linked list; candidate merges sit in a heap by (rank, position) and are checked when popped
// because a neighbour may have merged since the candidate was pushed.
void Tokenizer::merge(std::vector<Symbol>& symbols, std::vector<int32_t>& out) const {
    struct Candidate {
        int32_t rank;
        int left;
        int32_t left_id, right_id;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto consider = [&](int left) {
        if (left < 0 || symbols[size_t(left)].next < 0) return;
        const int right = symbols[size_t(left)].next;
        const uint64_t key = (uint64_t(uint32_t(symbols[size_t(left)].id)) << 32) | uint32_t(symbols[size_t(right)].id);
        auto it = merges_.find(key);
        if (it != merges_.end()) heap.push({it->second.first, left, symbols[size_t(left)].id, symbols[size_t(right)].id});
    };
    for (size_t i = 0; i + 1 < symbols.size(); ++i) consider(int(i));
    while (!heap.empty()) {
        const Candidate c = heap.top();
        heap.pop();
        Symbol& left = symbols[size_t(c.left)];
        if (left.id != c.left_id || left.next < 0 || symbols[size_t(left.next)].id != c.right_id) continue;
        if (left.id == -1) continue;
        Symbol& right = symbols[size_t(left.next)];
        left.id = merges_.at((uint64_t(uint32_t(c.left_id)) << 32) | uint32_t(c.right_id)).second;
        right.id = -1;  // gone
        left.next = right.next;
        if (right.next >= 0) symbols[size_t(right.next)].prev = c.left;
        consider(left.prev);
        consider(c.left);
    }
    for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) out.push_back(symbols[size_t(i)].id);
}

void Tokenizer::encode_bytes(std::string_view piece, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        auto it = vocab_.find(mapped_text(piece));
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    std::vector<Symbol> symbols(piece.size());
    for (size_t i = 0; i < piece.size(); ++i)
        symbols[i] = {byte_tokens_[uint8_t(piece[i])], int(i) - 1, i + 1 < piece.size() ? int(i) + 1 : -1};
    merge(symbols, out);
}

// A SentencePiece-style word: one symbol per character the vocabulary has; a character it lacks
// becomes its <0xXX> bytes under byte_fallback, otherwise the unknown token (one for a run of
// them when fuse_unk), as tokenizers' BPE does.
void Tokenizer::encode_characters(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        auto it = vocab_.find(std::string(word));
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    auto add = [&](int32_t id) {
        const int at = int(symbols.size());
        if (at > 0) symbols.back().next = at;
        symbols.push_back({id, at - 1, -1});
    };
    bool unk_pending = false;
    std::string ch;
    for (const Codepoint& cp : decode_utf8(word)) {
        ch.assign(word.substr(cp.offset, cp.length));
        auto it = vocab_.find(ch);
        if (it != vocab_.end()) {
            unk_pending = false;
            add(it->second);
        } else if (byte_tokens_[0] >= 0) {
            unk_pending = false;
            for (unsigned char b : ch) add(byte_tokens_[b]);
        } else if (unk_ >= 0 && !(fuse_unk_ && unk_pending)) {
            unk_pending = true;
            add(unk_);
        }
    }
    merge(symbols, out);
}

std::string Tokenizer::normalize(std::string_view text) const {
    std::string out(text);
    for (const auto& step : normalizer_) {
        switch (step.kind) {
            case NormalizeStep::Nfc:
                if (!nfc_inert(out)) out = nfc_normalize(out);
                break;
            case NormalizeStep::Prepend:
                if (!out.empty()) out.insert(0, step.what);
                break;
            case NormalizeStep::Replace: replace_all(out, step.what, step.with); break;
        }
    }
    return out;
}

// Text between added tokens; `at_start` when it begins the whole input (Metaspace's "first").
void Tokenizer::encode_ordinary(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::string normalized;
    if (!normalizer_.empty()) {
        normalized = normalize(text);
        text = normalized;
    }
    if (form_ == VocabForm::ByteLevel) {
        std::string prefixed;
        if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
            prefixed = " " + std::string(text);
            text = prefixed;
        }
        for (std::string_view piece : pretokenize(text, pattern_)) encode_bytes(piece, out);
        return;
    }
    if (!metaspace_) {
        encode_characters(text, out);
        return;
    }
    std::string spaced(text);
    replace_all(spaced, " ", replacement_);
    if ((prepend_ == Prepend::Always || (prepend_ == Prepend::First && at_start)) && !spaced.starts_with(replacement_))
        spaced.insert(0, replacement_);
    if (!metaspace_split_) {
        encode_characters(spaced, out);
        return;
    }
    // Split before every run of metaspaces, the run starting the next word (tokenizers'
    // MergedWithNext, which joins consecutive delimiters).
    size_t start = 0;
    const size_t width = replacement_.size();
    for (size_t at = spaced.find(replacement_, 1); at != std::string::npos; at = spaced.find(replacement_, at + width)) {
        if (at >= width && spaced.compare(at - width, width, replacement_) == 0) continue;  // inside a run
        encode_characters(std::string_view(spaced).substr(start, at - start), out);
        start = at;
    }
    encode_characters(std::string_view(spaced).substr(start), out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
    std::vector<int32_t> out;
    if (add_special) out = prefix_;
    size_t start = 0, i = 0;
    while (i < text.size()) {
        const Added* match = nullptr;
        for (const auto& a : added_)
            if (text.compare(i, a.content.size(), a.content) == 0) {
                match = &a;
                break;
            }
        if (!match) {
            ++i;
            continue;
        }
        encode_ordinary(text.substr(start, i - start), start == 0, out);
        out.push_back(match->id);
        i += match->content.size();
        start = i;
    }
    encode_ordinary(text.substr(start), start == 0, out);
    if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    for (int32_t id : ids)
        if (!(skip_special && is_special(id))) out += token_bytes(id);
    size_t strip = 0;
    while (strip < strip_leading_spaces_ && strip < out.size() && out[strip] == ' ') ++strip;
    out.erase(0, strip);
    return out;
}

std::string StreamDecoder::push(int32_t id) {
    if (tokenizer_->is_special(id)) return {};
    pending_ += tokenizer_->token_bytes(id);
    const size_t ready = complete_utf8_prefix(pending_);
    std::string out = sanitize_utf8(std::string_view(pending_).substr(0, ready));
    pending_.erase(0, ready);
    return out;
}

std::string StreamDecoder::finish() {
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace anvil::engine
