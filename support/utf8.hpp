// UTF-8 checks for text that leaves the registry layer. JSON output (nlohmann's dump) throws on
// invalid UTF-8, so every string a report or an error carries must be valid: a file name from a git
// tree or a parser's message quoting raw bytes may not be.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace anvil::support {

// The length (1 to 4) of the well-formed UTF-8 sequence starting at `at`, or 0 when the bytes
// there are not one (a stray continuation byte, an overlong form, a surrogate, beyond U+10FFFF, cut short).
std::size_t utf8_sequence_length(std::string_view text, std::size_t at);

// The offset of the first byte that does not start a well-formed sequence, or npos.
std::size_t first_invalid_utf8(std::string_view text);
inline bool is_valid_utf8(std::string_view text) { return first_invalid_utf8(text) == std::string_view::npos; }

// `text` with every byte that is not part of a well-formed sequence replaced by U+FFFD.
std::string to_valid_utf8(std::string_view text);

}  // namespace anvil::support
