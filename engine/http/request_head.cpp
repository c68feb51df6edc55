#include "engine/http/request_head.hpp"

#include <cctype>
#include <charconv>

namespace anvil::http {

namespace {

bool equals_ignoring_case(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
    return true;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

RequestHead invalid(std::string why) {
    RequestHead head;
    head.state = RequestHead::State::invalid;
    head.error = std::move(why);
    return head;
}

}  // namespace

RequestHead parse_request_head(std::string_view bytes) {
    const auto end = bytes.find("\r\n\r\n");
    if (end == std::string_view::npos) return {};
    RequestHead head;
    head.state = RequestHead::State::complete;
    head.length = end + 4;
    bool has_length = false, chunked = false, has_encoding = false;
    std::string_view rest = bytes.substr(0, end + 2);
    rest.remove_prefix(std::min(rest.size(), rest.find("\r\n") + 2));  // the request line
    while (!rest.empty()) {
        const auto eol = rest.find("\r\n");
        const std::string_view line = rest.substr(0, eol);
        rest.remove_prefix(eol + 2);
        const auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;  // httplib skips such lines too
        const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
        if (equals_ignoring_case(name, "Content-Length")) {
            std::uint64_t n = 0;
            const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
            if (value.empty() || ec != std::errc() || p != value.data() + value.size())
                return invalid("Content-Length must be a decimal number of bytes");
            if (has_length && n != head.content_length) return invalid("Content-Length is given twice with different values");
            has_length = true;
            head.content_length = n;
        } else if (equals_ignoring_case(name, "Transfer-Encoding")) {
            if (has_encoding || !equals_ignoring_case(value, "chunked"))
                return invalid("the only Transfer-Encoding this server reads is a single 'chunked'");
            has_encoding = chunked = true;
        }
    }
    if (has_length && chunked) return invalid("a request must not carry both Content-Length and Transfer-Encoding");
    head.framing = chunked ? BodyFraming::chunked : has_length ? BodyFraming::length : BodyFraming::none;
    return head;
}

}  // namespace anvil::http
