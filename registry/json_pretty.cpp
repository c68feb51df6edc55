#include "registry/json_pretty.hpp"

#include <cstring>

namespace anvil::registry {

void JsonIndenter::newline(std::string& out) const {
    out += '\n';
    out.append(depth_ * indent_, ' ');
}

void JsonIndenter::feed(std::string_view piece, std::string& out) {
    const char* p = piece.data();
    const char* const end = p + piece.size();
    while (p < end) {
        if (in_string_) {
            if (escaped_) {  // the byte after a backslash, whatever it is
                out += *p++;
                escaped_ = false;
                continue;
            }
            // Copy the run up to the next quote or backslash in one append.
            const char* stop = p;
            while (stop < end && *stop != '"' && *stop != '\\') ++stop;
            out.append(p, static_cast<std::size_t>(stop - p));
            p = stop;
            if (p == end) break;
            out += *p;
            if (*p == '\\') escaped_ = true;
            else in_string_ = false;
            ++p;
            continue;
        }
        const char c = *p++;
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (open_pending_) {
            open_pending_ = false;
            if (c == '}' || c == ']') {  // an empty container stays on its line: {} or []
                --depth_;
                out += c;
                continue;
            }
            newline(out);
        }
        switch (c) {
            case '{':
            case '[':
                out += c;
                ++depth_;
                open_pending_ = true;
                break;
            case '}':
            case ']':
                if (depth_ > 0) --depth_;
                newline(out);
                out += c;
                break;
            case ',':
                out += ',';
                newline(out);
                break;
            case ':':
                out += ": ";
                break;
            case '"':
                out += '"';
                in_string_ = true;
                break;
            default:  // numbers, true, false, null
                out += c;
                break;
        }
    }
}

void append_pretty_json(std::string& out, std::string_view json, int indent) {
    JsonIndenter indenter(indent);
    out.reserve(out.size() + json.size() + json.size() / 2);
    indenter.feed(json, out);
}

std::string pretty_json(std::string_view json, int indent) {
    std::string out;
    append_pretty_json(out, json, indent);
    return out;
}

}  // namespace anvil::registry
