// What went wrong in one document: the file, the JSON pointer (RFC 6901) and what was expected.
#pragma once

#include <string>
#include <vector>

namespace anvil::registry {

struct FieldError {
    std::string pointer;   // "" means the document as a whole
    std::string expected;  // what a valid document has there
    std::string found;     // a short rendering of what is there instead ("" when missing)

    // "at /launch/image: expected ..., found ..." (valid UTF-8 whatever the fields hold)
    std::string describe() const;
};

// "FILE: at /pointer: expected X, found Y" — one line, suitable for a log or a terminal.
std::string format_error(const std::string& file, const FieldError& error);

using FieldErrors = std::vector<FieldError>;

}  // namespace anvil::registry
