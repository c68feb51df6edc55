// Text from outside (request paths, parameters, bodies, exception messages quoting them) on its way
// into JSON or a log: nlohmann::json::dump() throws on invalid UTF-8, and a throw while answering
// an error is how one request used to end a whole server.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "support/utf8.hpp"

namespace anvil::http {

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD.
inline std::string valid_utf8(std::string_view bytes) { return support::to_valid_utf8(bytes); }

// A request body parsed as JSON, or one line saying why it is not.
struct ParsedBody {
    nlohmann::json value;  // null when error is set
    std::string error;
    bool ok() const { return error.empty(); }
};

// Request bodies nest a few levels (tool schemas perhaps a dozen); deeper is refused.
inline constexpr std::size_t kMaxBodyDepth = 64;

// Parses `text`, refusing nesting deeper than `max_depth` while parsing, before the deep part is
// built: nlohmann's dump() recurses, so a body nested 100,000 levels deep that reached it (the
// endpoint re-serialises every body it rewrites) would overflow the stack.
ParsedBody parse_json_body(std::string_view text, std::size_t max_depth = kMaxBodyDepth);

// Serialises any JSON value, invalid UTF-8 in its strings replaced: never throws on content.
inline std::string dump_json(const nlohmann::json& value, int indent = -1) {
    return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace anvil::http
