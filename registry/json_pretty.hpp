// Pretty-printing JSON text without parsing it: a streaming re-indenter over bytes another writer
// produced (registry::append_feasibility_json, nlohmann's dump()), for output a person reads.
// Building a DOM only to indent it costs ten times the writing (issue 22).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace anvil::registry {

// Re-indents JSON text fed to it in pieces, which may split it anywhere (inside a string, between
// a backslash and what it escapes, between a bracket and its match). The output has the layout of
// nlohmann's dump(indent): every member and element on its own line, indented `indent` spaces a
// level, `"key": value`, empty objects and arrays as `{}` and `[]`, no newline at the end. So
// re-indenting dump() gives exactly dump(indent).
//
// Whitespace outside strings is dropped; strings are copied byte for byte, escapes and UTF-8 as
// they are. The text is not validated: it must be JSON already, and malformed text comes out
// re-indented but as malformed.
class JsonIndenter {
public:
    explicit JsonIndenter(int indent = 2) : indent_(indent < 0 ? 0 : static_cast<std::size_t>(indent)) {}

    // Appends the re-indented form of `piece` to `out`.
    void feed(std::string_view piece, std::string& out);

    // True between values at the top level: no string, escape or container is open.
    bool at_top_level() const { return depth_ == 0 && !in_string_ && !escaped_ && !open_pending_; }

private:
    void newline(std::string& out) const;

    std::size_t indent_;
    std::size_t depth_ = 0;      // containers open
    bool in_string_ = false;
    bool escaped_ = false;       // the last byte was a backslash inside a string
    bool open_pending_ = false;  // a '{' or '[' was written: its line break waits to see if it is empty
};

// The whole text re-indented at once.
void append_pretty_json(std::string& out, std::string_view json, int indent = 2);
std::string pretty_json(std::string_view json, int indent = 2);

}  // namespace anvil::registry
