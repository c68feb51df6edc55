// "HOST:PORT" split once for anvild's configuration and the anvil CLI: "[v6]:port" needs the
// brackets, a bare host takes exactly one colon, the port is 1 to 5 digits up to 65535. Header
// only, so the CLI shares it without linking the daemon. Each caller words its own error.
#pragma once

#include <algorithm>
#include <optional>
#include <string>

namespace anvil::daemon {

struct SplitHostPort {
    std::string host;  // without IPv6 brackets, as bind() and connect() want it
    int port = 0;
};

inline std::optional<SplitHostPort> split_host_port(const std::string& text) {
    SplitHostPort out;
    std::string port;
    if (text.starts_with("[")) {
        const auto close = text.find(']');
        if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return std::nullopt;
        out.host = text.substr(1, close - 1);
        port = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string::npos || text.find(':') != colon) return std::nullopt;  // bare IPv6 needs brackets
        out.host = text.substr(0, colon);
        port = text.substr(colon + 1);
    }
    if (out.host.empty() || port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    out.port = std::stoi(port);
    if (out.port > 65535) return std::nullopt;
    return out;
}

}  // namespace anvil::daemon
