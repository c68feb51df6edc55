// Which Host and Origin a server answers: the defence against DNS rebinding and against web pages
// that post to a local server. A browser page on another origin can send a "simple" request
// (text/plain POST, GET) to 127.0.0.1 without any preflight, and a rebinding page reaches it under
// its own domain name; both are refused here, before any body is read.
//  - Host: an IP literal (v4, or v6 in brackets), "localhost", this machine's host name, or a name
//    the operator configured; a request without Host (HTTP/1.0) is answered.
//  - Origin (sent by browsers on cross-origin requests and on same-origin writes): the request's
//    own host and port, or an origin the operator configured ("*" for any); none is answered.
// A configured cross origin gets CORS headers, and its preflight (OPTIONS) an answer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::http {

struct OriginPolicy {
    std::vector<std::string> host_names;  // besides IP literals, localhost and this machine's name
    std::vector<std::string> origins;     // "scheme://host[:port]", or "*"
};

struct OriginVerdict {
    bool allowed = true;
    std::string refusal;      // when not allowed: one line for the client
    bool cross_origin = false;  // an allowed Origin other than the request's own: it gets CORS headers
};

// The host part of a Host header or an origin's authority, without its port, lowercased.
std::string host_without_port(std::string_view authority);

// Judges one request's Host and Origin headers (empty: absent) against `policy`; `machine_names`
// are this machine's own names (gethostname), passed in so that the rule stays pure.
OriginVerdict judge_origin(const OriginPolicy& policy, const std::vector<std::string>& machine_names, std::string_view host,
                           std::string_view origin);

// This machine's host name, as gethostname gives it (empty when it cannot be read).
std::vector<std::string> machine_names();

}  // namespace anvil::http
