// Checks a document's raw bytes before they are parsed, in one pass and without recursion, for what
// the parser and everything after it must never see: nesting deeper than a limit (nlohmann's dump()
// and our readers recurse, so a document nested 100,000 levels deep would overflow the stack) and
// bytes that are not UTF-8 (dump() throws on them). It is no JSON validator: malformed text it lets
// through is the parser's to report.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "registry/field_error.hpp"

namespace anvil::registry {

// Real registry documents nest fewer than ten levels; the JSON Schemas about fifteen.
inline constexpr std::size_t kMaxNestingDepth = 64;

// The first problem, as a FieldError whose pointer says where in the document it lies, or nothing.
std::optional<FieldError> check_json_text(std::string_view bytes, std::size_t max_depth = kMaxNestingDepth);

// "line 3, column 12" of the byte at `offset`.
std::string position_of(std::string_view bytes, std::size_t offset);

}  // namespace anvil::registry
