// Byte-level BPE from a Hugging Face tokenizer.json: added tokens split out first, then the
// pre-tokenizer's pattern, the GPT-2 byte-to-character mapping, and merges applied by rank.
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

class Tokenizer {
public:
    // Reads DIR/tokenizer.json and DIR/tokenizer_config.json (optional), or a GGUF file's vocabulary.
    static Tokenizer load(const std::filesystem::path& model_dir);
    Tokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& label);

    // `add_special`: the prefix and suffix tokens the post-processor or add_bos_token asks for
    // (a chat prompt already carries them in its text). Added tokens in the text are always matched.
    std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
    // The bytes of the tokens; special tokens left out when skip_special. May end in a partial
    // UTF-8 sequence: use StreamDecoder or sanitize_utf8 for text.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const;
    const std::string& token_bytes(int32_t id) const;
    bool is_special(int32_t id) const;
    std::optional<int32_t> token_id(std::string_view content) const;  // an added token or vocab entry

    int vocab_size() const { return int(bytes_.size()); }
    const std::string& chat_template() const { return chat_template_; }
    const std::string& bos_token() const { return bos_token_; }
    const std::string& eos_token() const { return eos_token_; }
    SplitPattern split_pattern() const { return pattern_; }

private:
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
    void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

    std::string label_;
    SplitPattern pattern_ = SplitPattern::Gpt2;
    bool add_prefix_space_ = false;
    bool ignore_merges_ = false;
    bool nfc_ = false;
    std::unordered_map<std::string, int32_t> vocab_;  // byte-mapped token text -> id
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged)
    int32_t byte_tokens_[256] = {};
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

}  // namespace anvil::engine
