#include "registry/json_text_check.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "registry/json_reader.hpp"
#include "support/utf8.hpp"

namespace anvil::registry {

namespace {

// One open object or array, and where inside it the scan is: enough to name the JSON pointer.
struct Frame {
    bool is_array = false;
    std::size_t index = 0;      // arrays: the element being read
    std::string key;            // objects: the member being read
    bool expecting_key = true;  // objects: between '{' or ',' and the next key
};

std::string byte_text(unsigned char byte) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(byte));
    return hex;
}

// A key as the parser will decode it; the raw text when it does not decode (the parser says why).
std::string decode_key(std::string_view quoted) {
    const std::string_view inner = quoted.substr(1, quoted.size() - 2);
    if (inner.find('\\') == std::string_view::npos) return std::string(inner);
    try {
        return nlohmann::json::parse(quoted).get<std::string>();
    } catch (const nlohmann::json::exception&) {
        return std::string(inner);
    }
}

class TextScan {
public:
    TextScan(std::string_view bytes, std::size_t max_depth) : bytes_(bytes), max_depth_(max_depth) {}

    std::optional<FieldError> run() {
        std::size_t i = 0;
        while (i < bytes_.size() && !problem_) {
            const auto c = static_cast<unsigned char>(bytes_[i]);
            if (c == '"') i = string_end(i);
            else if (c >= 0x80) i = checked_sequence_end(i);
            else i = structural(c, i);
        }
        return problem_;
    }

private:
    // The pointer of the value the scan is in (or about to read).
    std::string pointer() const {
        std::string out;
        for (const auto& f : frames_) {
            if (f.is_array) out += "/" + std::to_string(f.index);
            else if (!f.expecting_key) out += "/" + escape_pointer_token(f.key);
        }
        return out;
    }

    std::size_t structural(unsigned char c, std::size_t i) {
        switch (c) {
            case '{':
            case '[':
                if (frames_.size() >= max_depth_) {
                    problem_ = FieldError{pointer(), "at most " + std::to_string(max_depth_) + " levels of nested objects and arrays",
                                          std::string(c == '{' ? "an object" : "an array") + " at level " + std::to_string(max_depth_ + 1) +
                                              " (" + position_of(bytes_, i) + ")"};
                    break;
                }
                frames_.push_back(Frame{c == '[', 0, {}, c == '{'});
                break;
            case '}':
            case ']':
                if (!frames_.empty()) frames_.pop_back();
                break;
            case ',':
                if (frames_.empty()) break;
                if (frames_.back().is_array) ++frames_.back().index;
                else frames_.back().expecting_key = true;
                break;
            default:
                break;
        }
        return i + 1;
    }

    std::size_t checked_sequence_end(std::size_t i) {
        const std::size_t length = support::utf8_sequence_length(bytes_, i);
        if (length > 0) return i + length;
        problem_ = FieldError{pointer(), "valid UTF-8",
                              "the byte " + byte_text(static_cast<unsigned char>(bytes_[i])) + " at " + position_of(bytes_, i)};
        return bytes_.size();
    }

    // Skips the string opening at `open`, checking its bytes; a key is remembered for the pointer.
    std::size_t string_end(std::size_t open) {
        std::size_t i = open + 1;
        while (i < bytes_.size() && !problem_) {
            const auto c = static_cast<unsigned char>(bytes_[i]);
            if (c == '"') break;
            if (c == '\\') i += (i + 1 < bytes_.size() && static_cast<unsigned char>(bytes_[i + 1]) < 0x80) ? 2 : 1;
            else if (c >= 0x80) i = checked_sequence_end(i);
            else ++i;
        }
        if (problem_ || i >= bytes_.size()) return bytes_.size();  // unterminated: the parser reports it
        if (!frames_.empty() && !frames_.back().is_array && frames_.back().expecting_key) {
            frames_.back().key = decode_key(bytes_.substr(open, i + 1 - open));
            frames_.back().expecting_key = false;
        }
        return i + 1;
    }

    std::string_view bytes_;
    std::size_t max_depth_;
    std::vector<Frame> frames_;
    std::optional<FieldError> problem_;
};

}  // namespace

std::optional<FieldError> check_json_text(std::string_view bytes, std::size_t max_depth) {
    return TextScan(bytes, max_depth).run();
}

std::string position_of(std::string_view bytes, std::size_t offset) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < std::min(offset, bytes.size()); ++i) {
        if (bytes[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace anvil::registry
