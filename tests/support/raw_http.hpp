// Reading a raw HTTP/1.1 response, as the tests that write requests byte by byte on a socket get it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace anvil::test {

// The status code, or 0 where the response does not start with an HTTP/1.1 status line.
inline int status_of(const std::string& response) {
    if (response.size() < 12 || response.compare(0, 9, "HTTP/1.1 ") != 0) return 0;
    return std::stoi(response.substr(9, 3));
}

// The body parsed as JSON: null without a body, discarded where it is not JSON.
inline nlohmann::json body_of(const std::string& response) {
    const auto at = response.find("\r\n\r\n");
    return at == std::string::npos ? nlohmann::json() : nlohmann::json::parse(response.substr(at + 4), nullptr, false);
}

}  // namespace anvil::test
