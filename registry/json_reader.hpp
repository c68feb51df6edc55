// Typed, pointer-tracking access to a parsed JSON document. Every read that fails records one
// FieldError naming the JSON pointer and what was expected, and returns an empty optional, so a
// parser can go on and report every problem in a document in one pass.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "registry/field_error.hpp"

namespace anvil::registry {

using nlohmann::json;

// A value inside a document together with its JSON pointer. `value` is null when absent.
struct Node {
    const json* value = nullptr;
    std::string pointer;

    bool present() const { return value != nullptr; }
    bool is_null() const { return value == nullptr || value->is_null(); }
    Node child(std::string_view key) const;
    Node at(std::size_t index) const;
};

std::string escape_pointer_token(std::string_view token);
// A compact rendering of a JSON value for error messages (strings quoted, long values cut).
std::string render_short(const json& value);

enum class Presence { required, optional };

class JsonReader {
public:
    explicit JsonReader(FieldErrors& errors) : errors_(errors) {}

    void fail(const Node& at, std::string expected);
    void fail(const Node& at, std::string expected, std::string found);
    void fail(const std::string& pointer, std::string expected, std::string found);

    // Each getter: missing + required → error; present but wrong type → error; null counts as
    // missing for optional fields.
    std::optional<std::string> string(const Node& parent, std::string_view key, Presence p = Presence::required);
    std::optional<std::int64_t> integer(const Node& parent, std::string_view key, Presence p = Presence::required,
                                        std::int64_t min = INT64_MIN);
    std::optional<double> number(const Node& parent, std::string_view key, Presence p = Presence::required);
    std::optional<bool> boolean(const Node& parent, std::string_view key, Presence p = Presence::required);
    // Present and an object (or array); returns the child node, or an absent node after an error.
    Node object(const Node& parent, std::string_view key, Presence p = Presence::required);
    Node array(const Node& parent, std::string_view key, Presence p = Presence::required);
    std::vector<std::string> string_array(const Node& parent, std::string_view key, Presence p = Presence::required);
    // `true`, `false` or null (tri-state capability flags).
    std::optional<bool> nullable_boolean(const Node& parent, std::string_view key);

    bool ok() const { return errors_.empty(); }
    std::size_t error_count() const { return errors_.size(); }

private:
    const json* lookup(const Node& parent, std::string_view key, Presence p, const char* expected);
    FieldErrors& errors_;
};

}  // namespace anvil::registry
