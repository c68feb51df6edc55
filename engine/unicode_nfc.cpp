#include "engine/unicode_nfc.hpp"

#include <algorithm>
#include <vector>

#include "engine/unicode.hpp"

namespace anvil::engine {
namespace {

struct CombiningRange {
    uint32_t first, last;
    uint8_t ccc;
};
struct Decomposition {
    uint32_t cp, first, second;  // second 0: a singleton
};
struct Composition {
    uint32_t first, second, composite;
};
struct AssignedRange {
    uint32_t first, last;
};

#include "engine/unicode_nfc_tables.inc"

// Hangul syllables (Unicode 3.12): S = SBase + (L * VCount + V) * TCount + T.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid byte travels through the code point buffer as this plus the byte: a starter that
// neither decomposes nor composes.
constexpr uint32_t kRawByte = 0x110000;

const Decomposition* find_decomposition(uint32_t cp) {
    if (cp < 0xC0) return nullptr;
    const auto* end = std::end(kDecompositions);
    const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                      [](const Decomposition& d, uint32_t value) { return d.cp < value; });
    return it != end && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
    if (cp >= kSBase && cp < kSBase + kSCount) {
        const uint32_t s = cp - kSBase;
        out.push_back(kLBase + s / kNCount);
        out.push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
        return;
    }
    const Decomposition* d = find_decomposition(cp);
    if (!d) {
        out.push_back(cp);
        return;
    }
    decompose(d->first, out);
    if (d->second != 0) decompose(d->second, out);
}

// The primary composite of a starter and the character after it, or 0.
uint32_t compose(uint32_t first, uint32_t second) {
    if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
        return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
    if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
        second < kTBase + kTCount)
        return first + (second - kTBase);
    const auto* end = std::end(kCompositions);
    const auto* it = std::lower_bound(std::begin(kCompositions), end, std::make_pair(first, second),
                                      [](const Composition& c, const std::pair<uint32_t, uint32_t>& key) {
                                          return c.first != key.first ? c.first < key.first : c.second < key.second;
                                      });
    return it != end && it->first == first && it->second == second ? it->composite : 0;
}

uint8_t ccc_of(uint32_t cp) { return cp >= kRawByte ? 0 : canonical_combining_class(cp); }

}  // namespace

const char* nfc_unicode_version() { return ANVIL_NFC_UNICODE_VERSION; }
const char* nfc_source_version() { return ANVIL_NFC_SOURCE_VERSION; }

bool nfc_assigned(uint32_t cp) {
    const auto* end = std::end(kAssigned);
    const auto* it = std::upper_bound(std::begin(kAssigned), end, cp,
                                      [](uint32_t value, const AssignedRange& r) { return value < r.first; });
    return it != std::begin(kAssigned) && cp <= (it - 1)->last;
}

uint8_t canonical_combining_class(uint32_t cp) {
    if (cp < 0x300) return 0;
    const auto* end = std::end(kCombining);
    const auto* it = std::upper_bound(std::begin(kCombining), end, cp,
                                      [](uint32_t value, const CombiningRange& r) { return value < r.first; });
    return it != std::begin(kCombining) && cp <= (it - 1)->last ? (it - 1)->ccc : 0;
}

bool nfc_inert(std::string_view text) {
    // Lead bytes below 0xCC start characters below U+0300, which NFC never touches; from the
    // first other byte on, each character is decoded in place (an invalid byte stays as it is).
    for (size_t i = 0; i < text.size();) {
        const uint8_t lead = uint8_t(text[i]);
        if (lead < 0xCC) {
            ++i;
            continue;
        }
        const size_t length = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF5 ? 4 : 0;
        if (length == 0 || i + length > text.size()) {
            ++i;
            continue;
        }
        uint32_t cp = lead & (0x7F >> length);
        bool valid = true;
        for (size_t k = 1; k < length; ++k) {
            const uint8_t b = uint8_t(text[i + k]);
            valid = valid && (b & 0xC0) == 0x80;
            cp = (cp << 6) | (b & 0x3F);
        }
        if (!valid) {
            ++i;
            continue;
        }
        // Overlong or surrogate forms are invalid bytes too, and inert; real characters are checked.
        if (!is_nfc_inert(cp)) return false;
        i += length;
    }
    return true;
}

std::string nfc_normalize(std::string_view text) {
    // 1. The full canonical decomposition.
    std::vector<uint32_t> buffer;
    buffer.reserve(text.size() + 8);
    for (const Codepoint& cp : decode_utf8(text)) {
        if (cp.value == 0xFFFD && cp.length == 1) buffer.push_back(kRawByte + uint8_t(text[cp.offset]));
        else decompose(cp.value, buffer);
    }
    // 2. Canonical ordering: each run of non-starters sorted by class, stably.
    for (size_t i = 1; i < buffer.size(); ++i) {
        const uint8_t c = ccc_of(buffer[i]);
        if (c == 0) continue;
        for (size_t j = i; j > 0; --j) {
            const uint8_t before = ccc_of(buffer[j - 1]);
            if (before == 0 || before <= c) break;
            std::swap(buffer[j - 1], buffer[j]);
        }
    }
    // 3. Canonical composition: each character joins the last starter unless a character between
    // them blocks it (a starter, or one of the same or a higher class).
    size_t out = 0;
    long starter = -1;  // index in the output part of the buffer
    int last_class = -1;
    for (size_t i = 0; i < buffer.size(); ++i) {
        const uint32_t ch = buffer[i];
        const int c = ccc_of(ch);
        if (starter >= 0 && ch < kRawByte && buffer[size_t(starter)] < kRawByte && (last_class < c || last_class == 0)) {
            if (const uint32_t composite = compose(buffer[size_t(starter)], ch)) {
                buffer[size_t(starter)] = composite;
                continue;
            }
        }
        if (c == 0) starter = long(out);
        last_class = c;
        buffer[out++] = ch;
    }
    std::string result;
    result.reserve(text.size());
    for (size_t i = 0; i < out; ++i) {
        if (buffer[i] >= kRawByte) result += char(buffer[i] - kRawByte);
        else append_utf8(result, buffer[i]);
    }
    return result;
}

}  // namespace anvil::engine
