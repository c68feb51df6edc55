#include "engine/http/safe_text.hpp"

#include <cstdint>

namespace anvil::http {

namespace {

// The length of the valid UTF-8 sequence at bytes[i], or 0 (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF).
std::size_t valid_sequence_length(std::string_view bytes, std::size_t i) {
    const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(bytes[k]); };
    const std::uint8_t b0 = byte(i);
    if (b0 < 0x80) return 1;
    std::size_t length;
    std::uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) length = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        length = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        length = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (i + length > bytes.size()) return 0;
    if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (std::size_t k = 2; k < length; ++k)
        if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
    return length;
}

}  // namespace

ParsedBody parse_json_body(std::string_view text, std::size_t max_depth) {
    struct TooDeep {};
    ParsedBody out;
    try {
        out.value = nlohmann::json::parse(text, [max_depth](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
            // `depth` is the number of containers open around the one that starts.
            const bool starts = event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start;
            if (starts && static_cast<std::size_t>(depth) >= max_depth) throw TooDeep{};
            return true;
        });
    } catch (const TooDeep&) {
        out.value = nullptr;
        out.error = "the JSON body nests objects and arrays deeper than " + std::to_string(max_depth) + " levels";
    } catch (const nlohmann::json::exception& e) {
        out.value = nullptr;
        out.error = valid_utf8(e.what());
    }
    return out;
}

std::string valid_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    for (std::size_t i = 0; i < bytes.size();) {
        const std::size_t n = valid_sequence_length(bytes, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
        } else {
            out.append(bytes.substr(i, n));
            i += n;
        }
    }
    return out;
}

}  // namespace anvil::http
