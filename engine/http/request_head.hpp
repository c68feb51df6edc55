// What a server must know of an HTTP/1.1 request before it reads the body: whether the head (request
// line and headers) has fully arrived, how long it is, and how the body is framed. Pure, so the
// connection gate can decide on bytes alone, and fuzzable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anvil::http {

enum class BodyFraming { none, length, chunked };

struct RequestHead {
    enum class State { incomplete, complete, invalid } state = State::incomplete;
    std::size_t length = 0;  // bytes of the head, its closing empty line included
    BodyFraming framing = BodyFraming::none;
    std::uint64_t content_length = 0;  // with BodyFraming::length
    bool expect_continue = false;      // 'Expect: 100-continue': the client sends the body once told to
    std::size_t expect_at = 0, expect_length = 0;  // where that field's line is in the head, its CRLF included
    std::string method, target;        // of the request line, as sent
    std::vector<std::pair<std::string, std::string>> fields;  // the header fields, names as sent, values trimmed
    std::string error;                 // with State::invalid: one line for the client
};

// Looks at the start of `bytes`. A request without Content-Length or Transfer-Encoding has no body
// (RFC 9112 6.3), whatever its method. Content-Length given twice with different values, or together
// with Transfer-Encoding, is invalid: servers and proxies that disagree on framing are how requests
// are smuggled.
RequestHead parse_request_head(std::string_view bytes);

// Follows a chunked body's framing (RFC 9112 7.1) as its bytes arrive, to find where it ends
// without decoding it: each feed() continues from where the last one stopped, so a body that
// arrives in many reads is scanned once. `body` is the body's bytes so far (from just after the
// head), the same bytes plus more on each call.
class ChunkedBodyScan {
public:
    enum class State { more, complete, invalid };

    explicit ChunkedBodyScan(std::size_t max_line = 4096) : max_line_(max_line) {}
    State feed(std::string_view body);
    std::size_t end() const { return pos_; }            // with State::complete: the framed body's bytes, trailers included
    std::uint64_t data_bytes() const { return data_; }  // the chunks' data so far
    const std::string& error() const { return error_; }

private:
    enum class Step { size_line, data, data_end, trailer };
    State fail(std::string why);

    std::size_t max_line_;
    Step step_ = Step::size_line;
    State state_ = State::more;
    std::size_t pos_ = 0;
    std::uint64_t chunk_left_ = 0;
    std::uint64_t data_ = 0;
    std::string error_;
};

}  // namespace anvil::http
