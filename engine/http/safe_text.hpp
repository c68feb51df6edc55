// Text from outside (request paths, parameters, bodies, exception messages quoting them) on its way
// into JSON or a log: nlohmann::json::dump() throws on invalid UTF-8, and a throw while answering
// an error is how one request used to end a whole server.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace anvil::http {

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view bytes);

// Serialises any JSON value, invalid UTF-8 in its strings replaced: never throws on content.
inline std::string dump_json(const nlohmann::json& value, int indent = -1) {
    return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace anvil::http
