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
    const std::string_view request_line = rest.substr(0, rest.find("\r\n"));
    if (const auto sp = request_line.find(' '); sp != std::string_view::npos) {
        head.method = std::string(request_line.substr(0, sp));
        const std::string_view after = request_line.substr(sp + 1);
        head.target = std::string(after.substr(0, after.find(' ')));
    }
    rest.remove_prefix(std::min(rest.size(), rest.find("\r\n") + 2));  // the request line
    while (!rest.empty()) {
        const auto eol = rest.find("\r\n");
        const std::string_view line = rest.substr(0, eol);
        rest.remove_prefix(eol + 2);
        const auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;  // httplib skips such lines too
        const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
        head.fields.emplace_back(name, value);
        if (equals_ignoring_case(name, "Content-Length")) {
            std::uint64_t n = 0;
            const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
            if (value.empty() || ec != std::errc() || p != value.data() + value.size())
                return invalid("Content-Length must be a decimal number of bytes");
            if (has_length && n != head.content_length) return invalid("Content-Length is given twice with different values");
            has_length = true;
            head.content_length = n;
        } else if (equals_ignoring_case(name, "Expect")) {
            head.expect_continue = equals_ignoring_case(value, "100-continue");
            head.expect_at = static_cast<std::size_t>(line.data() - bytes.data());
            head.expect_length = line.size() + 2;
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

ChunkedBodyScan::State ChunkedBodyScan::fail(std::string why) {
    error_ = std::move(why);
    return state_ = State::invalid;
}

ChunkedBodyScan::State ChunkedBodyScan::feed(std::string_view body) {
    while (state_ == State::more) {
        switch (step_) {
            case Step::size_line: {
                // hex digits, then optional ';' extensions, then CRLF
                const auto eol = body.find("\r\n", pos_);
                if (eol == std::string_view::npos)
                    return body.size() - pos_ > max_line_ ? fail("a chunk size line is longer than " + std::to_string(max_line_) + " bytes") : state_;
                std::string_view line = body.substr(pos_, eol - pos_);
                if (line.size() > max_line_) return fail("a chunk size line is longer than " + std::to_string(max_line_) + " bytes");
                line = line.substr(0, line.find(';'));
                while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
                std::uint64_t size = 0;
                const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
                if (line.empty() || line.size() > 15 || ec != std::errc() || p != line.data() + line.size())
                    return fail("a chunk size is not a hexadecimal number");
                pos_ = eol + 2;
                chunk_left_ = size;
                data_ += size;
                step_ = size == 0 ? Step::trailer : Step::data;
                break;
            }
            case Step::data: {
                const std::uint64_t have = body.size() - pos_;
                if (have < chunk_left_) return state_;
                pos_ += static_cast<std::size_t>(chunk_left_);
                chunk_left_ = 0;
                step_ = Step::data_end;
                break;
            }
            case Step::data_end:
                if (body.size() - pos_ < 2) return state_;
                if (body.substr(pos_, 2) != "\r\n") return fail("a chunk's data does not end with CRLF");
                pos_ += 2;
                step_ = Step::size_line;
                break;
            case Step::trailer: {
                // trailer fields, each a line, until an empty line
                const auto eol = body.find("\r\n", pos_);
                if (eol == std::string_view::npos)
                    return body.size() - pos_ > max_line_ ? fail("a trailer line is longer than " + std::to_string(max_line_) + " bytes") : state_;
                const bool empty = eol == pos_;
                pos_ = eol + 2;
                if (empty) state_ = State::complete;
                break;
            }
        }
    }
    return state_;
}

}  // namespace anvil::http
