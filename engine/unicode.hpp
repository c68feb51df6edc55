// UTF-8 and the Unicode properties the tokenizer needs: letters, numbers, white space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::engine {

struct CodepointRange {
    uint32_t first;
    uint32_t last;
};

namespace unicode_tables {
extern const char* const kLettersVersion;  // the Unicode version of kLetters and kNumbers
extern const CodepointRange kLetters[];
extern const size_t kLetters_count;
extern const CodepointRange kNumbers[];
extern const size_t kNumbers_count;
extern const CodepointRange kNfcSensitive[];
extern const size_t kNfcSensitive_count;
}  // namespace unicode_tables

bool is_letter(uint32_t cp);      // \p{L}
bool is_number(uint32_t cp);      // \p{N}
bool is_whitespace(uint32_t cp);  // \s: the White_Space property
// False when NFC normalisation could change a string containing cp.
bool is_nfc_inert(uint32_t cp);

struct Codepoint {
    uint32_t value;   // U+FFFD for a byte that does not start a valid sequence
    uint32_t offset;  // byte offset in the text
    uint32_t length;  // bytes it spans
};
std::vector<Codepoint> decode_utf8(std::string_view text);

void append_utf8(std::string& out, uint32_t cp);

// The length of the longest prefix of `bytes` that does not end inside an unfinished UTF-8
// sequence: what can be emitted now without splitting a character across two stream chunks.
size_t complete_utf8_prefix(std::string_view bytes);

// Replaces every invalid sequence with U+FFFD, so the text can go into JSON.
std::string sanitize_utf8(std::string_view bytes);

}  // namespace anvil::engine
