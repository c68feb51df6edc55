#include "engine/unicode.hpp"

#include <algorithm>

#include "support/utf8.hpp"

namespace anvil::engine {
namespace {

bool in_ranges(const CodepointRange* ranges, size_t count, uint32_t cp) {
    const CodepointRange* end = ranges + count;
    const CodepointRange* it =
        std::upper_bound(ranges, end, cp, [](uint32_t value, const CodepointRange& r) { return value < r.first; });
    return it != ranges && cp <= (it - 1)->last;
}

// The length of the valid sequence at bytes[i], or 0.
size_t sequence_length(std::string_view bytes, size_t i, uint32_t* value) {
    const auto b = [&](size_t k) { return uint8_t(bytes[k]); };
    const uint8_t lead = b(i);
    if (lead < 0x80) {
        *value = lead;
        return 1;
    }
    size_t length;
    uint32_t cp, minimum;
    if ((lead & 0xE0) == 0xC0) length = 2, cp = lead & 0x1F, minimum = 0x80;
    else if ((lead & 0xF0) == 0xE0) length = 3, cp = lead & 0x0F, minimum = 0x800;
    else if ((lead & 0xF8) == 0xF0) length = 4, cp = lead & 0x07, minimum = 0x10000;
    else return 0;
    if (i + length > bytes.size()) return 0;
    for (size_t k = 1; k < length; ++k) {
        if ((b(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    if (cp < minimum || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    *value = cp;
    return length;
}

}  // namespace

bool is_letter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return in_ranges(unicode_tables::kLetters, unicode_tables::kLetters_count, cp);
}

bool is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return in_ranges(unicode_tables::kNumbers, unicode_tables::kNumbers_count, cp);
}

bool is_whitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

bool is_nfc_inert(uint32_t cp) {
    return cp < 0x300 || !in_ranges(unicode_tables::kNfcSensitive, unicode_tables::kNfcSensitive_count, cp);
}

std::vector<Codepoint> decode_utf8(std::string_view text) {
    std::vector<Codepoint> out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        uint32_t value = 0;
        size_t length = sequence_length(text, i, &value);
        if (length == 0) value = 0xFFFD, length = 1;
        out.push_back({value, uint32_t(i), uint32_t(length)});
        i += length;
    }
    return out;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

size_t complete_utf8_prefix(std::string_view bytes) {
    // Look back at most three bytes for a lead byte whose sequence is not finished yet.
    const size_t n = bytes.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const uint8_t c = uint8_t(bytes[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
        size_t needed = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return needed > back ? n - back : n;
    }
    return n;
}

std::string sanitize_utf8(std::string_view bytes) { return support::to_valid_utf8(bytes); }

}  // namespace anvil::engine
