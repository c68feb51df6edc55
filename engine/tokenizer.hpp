// BPE from a Hugging Face tokenizer.json, in its two vocabulary forms:
//  - byte-level (GPT-2, Llama 3, Qwen): added tokens split out first, then the pre-tokenizer's
//    pattern, the GPT-2 byte-to-character mapping, and merges applied by rank;
//  - SentencePiece-style (Llama 2, Mistral 7B, Mixtral, TinyLlama): tokens are text with spaces
//    written as U+2581 (the metaspace, added by a Prepend/Replace normalizer or a Metaspace
//    pre-tokenizer), merges applied by rank to characters, and a character the vocabulary lacks
//    spelled as <0xXX> byte tokens (byte_fallback) or the unknown token.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/pretokenizer.hpp"

namespace anvil::engine {

enum class VocabForm {
    ByteLevel,      // tokens are bytes written in the GPT-2 byte-to-character mapping
    SentencePiece,  // tokens are UTF-8 text with the metaspace; bytes as <0xXX>
};

class Tokenizer {
public:
    // Reads DIR/tokenizer.json and DIR/tokenizer_config.json (optional), or a GGUF file's vocabulary.
    static Tokenizer load(const std::filesystem::path& model_dir);
    Tokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& label);

    // `add_special`: the prefix and suffix tokens the post-processor or add_bos_token asks for
    // (a chat prompt already carries them in its text). Added tokens in the text are always matched.
    std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
    // The bytes of the tokens; special tokens left out when skip_special. A SentencePiece-style
    // decoder's leading space is stripped, as Hugging Face's decode does. May end in a partial
    // UTF-8 sequence: use StreamDecoder or sanitize_utf8 for text.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const;
    const std::string& token_bytes(int32_t id) const;
    bool is_special(int32_t id) const;
    std::optional<int32_t> token_id(std::string_view content) const;  // an added token or vocab entry

    int vocab_size() const { return int(bytes_.size()); }
    const std::string& chat_template() const { return chat_template_; }
    const std::string& bos_token() const { return bos_token_; }
    const std::string& eos_token() const { return eos_token_; }
    VocabForm form() const { return form_; }
    SplitPattern split_pattern() const { return pattern_; }  // byte-level vocabularies only
    // SentencePiece-style only: whether text that does not start after an added token gets a
    // leading metaspace (llama.cpp's add_space_prefix).
    bool adds_space_prefix() const { return prepend_ != Prepend::Never; }

private:
    struct Symbol {
        int32_t id;
        int prev, next;
    };
    struct NormalizeStep {
        enum Kind { Nfc, Prepend, Replace } kind;
        std::string what, with;
    };
    enum class Prepend { Always, First, Never };

    void parse(const nlohmann::json& doc, const nlohmann::json& config, const std::string& label);
    void parse_normalizer(const nlohmann::json& normalizer, const std::string& label);
    void parse_sentencepiece(const nlohmann::json& doc, const std::string& label);
    std::string normalize(std::string_view text) const;
    void merge(std::vector<Symbol>& symbols, std::vector<int32_t>& out) const;
    void encode_bytes(std::string_view piece, std::vector<int32_t>& out) const;
    void encode_characters(std::string_view word, std::vector<int32_t>& out) const;
    void encode_ordinary(std::string_view text, bool at_start, std::vector<int32_t>& out) const;

    std::string label_;
    VocabForm form_ = VocabForm::ByteLevel;
    SplitPattern pattern_ = SplitPattern::Gpt2;
    bool add_prefix_space_ = false;
    bool ignore_merges_ = false;
    std::vector<NormalizeStep> normalizer_;
    // SentencePiece-style: the Metaspace pre-tokenizer, when there is one instead of a normalizer.
    bool metaspace_ = false;
    bool metaspace_split_ = false;
    Prepend prepend_ = Prepend::Never;
    std::string replacement_;  // the metaspace, UTF-8
    int32_t unk_ = -1;
    bool fuse_unk_ = false;
    size_t strip_leading_spaces_ = 0;  // what decode() strips

    std::unordered_map<std::string, int32_t> vocab_;  // token text as written in the vocabulary -> id
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged)
    int32_t byte_tokens_[256] = {};  // -1 where a SentencePiece-style vocabulary has no <0xXX>
    std::vector<std::string> bytes_;  // id -> the bytes it stands for
    std::vector<bool> special_;
    struct Added {
        std::string content;
        int32_t id;
    };
    std::vector<Added> added_;  // longest first
    std::vector<int32_t> prefix_, suffix_;
    std::string chat_template_, bos_token_, eos_token_;
};

// Turns a stream of token ids into text that never ends inside a UTF-8 character: the bytes of an
// unfinished character wait for the next token.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
    std::string push(int32_t id);
    std::string finish();  // whatever is left, invalid bytes replaced

private:
    const Tokenizer* tokenizer_;
    std::string pending_;
};

// The GPT-2 byte <-> printable character mapping byte-level BPE vocabularies are written in.
uint32_t byte_to_unicode(uint8_t byte);
int unicode_to_byte(uint32_t cp);  // -1 when cp is no byte's character

// "<0x0A>" for byte 10: how SentencePiece vocabularies name a byte. The byte a name stands for,
// or -1 when the text is no byte token.
std::string byte_token_name(uint8_t byte);
int byte_token_value(std::string_view text);

// The metaspace, U+2581 LOWER ONE EIGHTH BLOCK, that SentencePiece writes spaces as.
inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";

}  // namespace anvil::engine
