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
    if (is_gguf_file(model_dir)) {
        const GgufModel model(model_dir);
        const auto [doc, config] = model.tokenizer_documents();
        return Tokenizer(doc, config, model_dir.string() + " (its tokenizer.ggml metadata)");
    }
    const auto file = model_dir / "tokenizer.json";
    const auto config_file = model_dir / "tokenizer_config.json";
    const json config = std::filesystem::exists(config_file) ? read_json_file(config_file) : json::object();
    return Tokenizer(read_json_file(file), config, file.string());
}

Tokenizer::Tokenizer(const json& doc, const json& config, const std::string& label) : label_(label) {
    auto fail = [&](const std::string& what) { return std::runtime_error(label + ": " + what); };
    if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object()) throw fail("has no model section");
    const json& model = doc["model"];
    if (model.value("type", std::string("BPE")) != "BPE")
        throw fail("model.type is " + model.value("type", std::string()) + "; anvil-engine reads byte-level BPE only");
    if (model.value("byte_fallback", false))
        throw fail("model.byte_fallback is set: a SentencePiece-style vocabulary, not byte-level BPE");
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
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string() || a["content"].get<std::string>().empty())
            throw fail("added_tokens holds an entry without id and content");
        largest = std::max(largest, a["id"].get<int32_t>());
    }
    bytes_.assign(size_t(largest + 1), std::string());
    special_.assign(size_t(largest + 1), false);
    for (const auto& [text, id] : vocab_) bytes_[size_t(id)] = unmapped_bytes(text);
    for (const auto& a : added) {
        const int32_t id = a["id"];
        const std::string content = a["content"];
        bytes_[size_t(id)] = content;
        special_[size_t(id)] = a.value("special", false);
        added_.push_back({content, id});
    }
    std::stable_sort(added_.begin(), added_.end(),
                     [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });

    for (int b = 0; b < 256; ++b) {
        std::string ch;
        append_utf8(ch, byte_to_unicode(uint8_t(b)));
        auto it = vocab_.find(ch);
        if (it == vocab_.end())
            throw fail("the vocabulary lacks the byte-level token for byte " + std::to_string(b) +
                       ": not a byte-level BPE vocabulary");
        byte_tokens_[b] = it->second;
    }

    const json merges = model.value("merges", json::array());
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
        merges_.emplace(key, std::make_pair(rank++, joined->second));
    }

    if (doc.contains("normalizer") && !doc["normalizer"].is_null()) {
        // NFC alone, or a Sequence of NFCs (an empty Sequence normalises nothing).
        std::function<void(const json&)> normalizer = [&](const json& n) {
            const std::string type = n.is_object() ? n.value("type", std::string("?")) : std::string("?");
            if (type == "NFC") {
                nfc_ = true;
            } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
                for (const auto& inner : n["normalizers"]) normalizer(inner);
            } else {
                throw fail("normalizer " + type + " is not supported (NFC is, alone or in a Sequence)");
            }
        };
        normalizer(doc["normalizer"]);
    }

    const json pre = doc.value("pre_tokenizer", json());
    auto byte_level = [&](const json& p) {
        add_prefix_space_ = p.value("add_prefix_space", false);
        return p.value("use_regex", true);
    };
    if (pre.is_object() && pre.value("type", std::string()) == "ByteLevel") {
        if (!byte_level(pre)) throw fail("a ByteLevel pre-tokenizer without a split pattern is not supported");
        pattern_ = SplitPattern::Gpt2;
    } else if (pre.is_object() && pre.value("type", std::string()) == "Sequence" && pre.contains("pretokenizers") &&
               pre["pretokenizers"].size() == 2 && pre["pretokenizers"][0].value("type", std::string()) == "Split" &&
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

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
    for (const auto& a : added_)
        if (a.content == content) return a.id;
    auto it = vocab_.find(mapped_text(content));
    if (it != vocab_.end()) return it->second;
    return std::nullopt;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    static const std::string empty;
    return id >= 0 && id < vocab_size() ? bytes_[size_t(id)] : empty;
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[size_t(id)]; }

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        auto it = vocab_.find(mapped_text(piece));
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    // Symbols in a linked list; candidate merges in a heap by (rank, position), checked when popped
    // because a neighbour may have merged since the candidate was pushed.
    struct Symbol {
        int32_t id;
        int prev, next;
    };
    std::vector<Symbol> symbols(piece.size());
    for (size_t i = 0; i < piece.size(); ++i)
        symbols[i] = {byte_tokens_[uint8_t(piece[i])], int(i) - 1, i + 1 < piece.size() ? int(i) + 1 : -1};
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
    for (size_t i = 0; i + 1 < piece.size(); ++i) consider(int(i));
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
    for (int i = piece.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) out.push_back(symbols[size_t(i)].id);
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::string normalized;
    if (nfc_ && !nfc_inert(text)) {
        normalized = nfc_normalize(text);
        text = normalized;
    }
    std::string prefixed;
    if (add_prefix_space_ && text.front() != ' ') {
        prefixed = " " + std::string(text);
        text = prefixed;
    }
    for (std::string_view piece : pretokenize(text, pattern_)) encode_piece(piece, out);
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
        encode_ordinary(text.substr(start, i - start), out);
        out.push_back(match->id);
        i += match->content.size();
        start = i;
    }
    encode_ordinary(text.substr(start), out);
    if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    for (int32_t id : ids)
        if (!(skip_special && is_special(id))) out += token_bytes(id);
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
