// What a server must know of an HTTP/1.1 request before it reads the body: whether the head (request
// line and headers) has fully arrived, how long it is, and how the body is framed. Pure, so the
// connection gate can decide on bytes alone, and fuzzable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace anvil::http {

enum class BodyFraming { none, length, chunked };

struct RequestHead {
    enum class State { incomplete, complete, invalid } state = State::incomplete;
    std::size_t length = 0;  // bytes of the head, its closing empty line included
    BodyFraming framing = BodyFraming::none;
    std::uint64_t content_length = 0;  // with BodyFraming::length
    std::string error;                 // with State::invalid: one line for the client
};

// Looks at the start of `bytes`. A request without Content-Length or Transfer-Encoding has no body
// (RFC 9112 6.3), whatever its method. Content-Length given twice with different values, or together
// with Transfer-Encoding, is invalid: servers and proxies that disagree on framing are how requests
// are smuggled.
RequestHead parse_request_head(std::string_view bytes);

}  // namespace anvil::http
