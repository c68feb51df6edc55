#include "registry/json_reader.hpp"

#include "support/utf8.hpp"

namespace anvil::registry {

// Error lines end up in JSON (the API, `anvil registry check --format json`), which must be UTF-8:
// a file name or a quoted byte that is not has it replaced, here, where every line is made.
std::string FieldError::describe() const {
    std::string out = "at " + (pointer.empty() ? std::string("/") : pointer) + ": expected " + expected;
    out += found.empty() ? ", found nothing" : ", found " + found;
    return support::to_valid_utf8(out);
}

std::string format_error(const std::string& file, const FieldError& error) {
    return support::to_valid_utf8(file) + ": " + error.describe();
}

std::string escape_pointer_token(std::string_view token) {
    std::string out;
    out.reserve(token.size());
    for (char c : token) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

std::string render_short(const json& value) {
    std::string text;
    if (value.is_object()) text = "an object";
    else if (value.is_array()) text = "an array of " + std::to_string(value.size());
    else text = value.dump(-1, ' ', false, json::error_handler_t::replace);
    constexpr std::size_t limit = 80;
    if (text.size() <= limit) return text;
    std::size_t cut = limit;  // not inside a multi-byte character: the cut text stays UTF-8
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    return text.substr(0, cut) + "…";
}

Node Node::child(std::string_view key) const {
    Node out{nullptr, pointer + "/" + escape_pointer_token(key)};
    if (value && value->is_object()) {
        auto it = value->find(key);
        if (it != value->end()) out.value = &*it;
    }
    return out;
}

Node Node::at(std::size_t index) const {
    Node out{nullptr, pointer + "/" + std::to_string(index)};
    if (value && value->is_array() && index < value->size()) out.value = &(*value)[index];
    return out;
}

void JsonReader::fail(const Node& at, std::string expected) {
    errors_.push_back({at.pointer, std::move(expected), at.value ? render_short(*at.value) : std::string()});
}

void JsonReader::fail(const Node& at, std::string expected, std::string found) {
    errors_.push_back({at.pointer, std::move(expected), std::move(found)});
}

void JsonReader::fail(const std::string& pointer, std::string expected, std::string found) {
    errors_.push_back({pointer, std::move(expected), std::move(found)});
}

const json* JsonReader::lookup(const Node& parent, std::string_view key, Presence p, const char* expected) {
    Node n = parent.child(key);
    if (n.is_null()) {
        if (p == Presence::required) fail(n, expected);
        return nullptr;
    }
    return n.value;
}

std::optional<std::string> JsonReader::string(const Node& parent, std::string_view key, Presence p) {
    const json* v = lookup(parent, key, p, "a string");
    if (!v) return std::nullopt;
    if (!v->is_string()) {
        fail(parent.child(key), "a string");
        return std::nullopt;
    }
    return v->get<std::string>();
}

std::optional<std::int64_t> JsonReader::integer(const Node& parent, std::string_view key, Presence p,
                                                std::int64_t min) {
    const char* expected = min == 0 ? "a non-negative integer" : min == 1 ? "a positive integer" : "an integer";
    const json* v = lookup(parent, key, p, expected);
    if (!v) return std::nullopt;
    std::optional<std::int64_t> out;
    if (v->is_number_unsigned()) {
        if (v->get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)) out = static_cast<std::int64_t>(v->get<std::uint64_t>());
    } else if (v->is_number_integer()) {
        out = v->get<std::int64_t>();
    }
    if (!out || *out < min) {
        fail(parent.child(key), expected);
        return std::nullopt;
    }
    return out;
}

std::optional<double> JsonReader::number(const Node& parent, std::string_view key, Presence p) {
    const json* v = lookup(parent, key, p, "a number");
    if (!v) return std::nullopt;
    if (!v->is_number()) {
        fail(parent.child(key), "a number");
        return std::nullopt;
    }
    return v->get<double>();
}

std::optional<bool> JsonReader::boolean(const Node& parent, std::string_view key, Presence p) {
    const json* v = lookup(parent, key, p, "true or false");
    if (!v) return std::nullopt;
    if (!v->is_boolean()) {
        fail(parent.child(key), "true or false");
        return std::nullopt;
    }
    return v->get<bool>();
}

std::optional<bool> JsonReader::nullable_boolean(const Node& parent, std::string_view key) {
    Node n = parent.child(key);
    if (!n.present()) {
        fail(n, "true, false or null");
        return std::nullopt;
    }
    if (n.value->is_null()) return std::nullopt;
    if (!n.value->is_boolean()) {
        fail(n, "true, false or null");
        return std::nullopt;
    }
    return n.value->get<bool>();
}

Node JsonReader::object(const Node& parent, std::string_view key, Presence p) {
    Node n = parent.child(key);
    if (n.is_null()) {
        if (p == Presence::required) fail(n, "an object");
        return Node{nullptr, n.pointer};
    }
    if (!n.value->is_object()) {
        fail(n, "an object");
        return Node{nullptr, n.pointer};
    }
    return n;
}

Node JsonReader::array(const Node& parent, std::string_view key, Presence p) {
    Node n = parent.child(key);
    if (n.is_null()) {
        if (p == Presence::required) fail(n, "an array");
        return Node{nullptr, n.pointer};
    }
    if (!n.value->is_array()) {
        fail(n, "an array");
        return Node{nullptr, n.pointer};
    }
    return n;
}

std::vector<std::string> JsonReader::string_array(const Node& parent, std::string_view key, Presence p) {
    std::vector<std::string> out;
    Node arr = array(parent, key, p);
    if (!arr.present()) return out;
    for (std::size_t i = 0; i < arr.value->size(); ++i) {
        Node item = arr.at(i);
        if (!item.value->is_string()) {
            fail(item, "a string");
            continue;
        }
        out.push_back(item.value->get<std::string>());
    }
    return out;
}

}  // namespace anvil::registry
