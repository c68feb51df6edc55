#include "registry/evidence_variable.hpp"

#include <array>
#include <utility>

namespace anvil::registry {

namespace {
constexpr std::array<std::pair<EvidenceStatus, std::string_view>, 5> kStatusNames{{
    {EvidenceStatus::measured, "measured"},
    {EvidenceStatus::confirmed, "confirmed"},
    {EvidenceStatus::estimated, "estimated"},
    {EvidenceStatus::assumed, "assumed"},
    {EvidenceStatus::unknown, "unknown"},
}};

std::optional<Number> read_number(const Node& parent, std::string_view key, JsonReader& reader) {
    Node n = parent.child(key);
    if (!n.present()) return std::nullopt;
    const json& v = *n.value;
    if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX))
        return Number{static_cast<std::int64_t>(v.get<std::uint64_t>())};
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return Number{v.get<std::int64_t>()};
    if (v.is_number_float() && v.get<double>() >= 0.0) return Number{v.get<double>()};
    reader.fail(n, "a non-negative number");
    return std::nullopt;
}

bool less(const Number& a, const Number& b) {
    if (std::holds_alternative<std::int64_t>(a) && std::holds_alternative<std::int64_t>(b))
        return std::get<std::int64_t>(a) < std::get<std::int64_t>(b);
    return to_double(a) < to_double(b);
}
}  // namespace

std::string_view to_string(EvidenceStatus s) {
    for (const auto& [status, name] : kStatusNames)
        if (status == s) return name;
    return "unknown";
}

std::optional<EvidenceStatus> parse_evidence_status(std::string_view s) {
    for (const auto& [status, name] : kStatusNames)
        if (name == s) return status;
    return std::nullopt;
}

double to_double(const Number& n) {
    return std::holds_alternative<std::int64_t>(n) ? static_cast<double>(std::get<std::int64_t>(n)) : std::get<double>(n);
}

json to_json(const Number& n) {
    return std::holds_alternative<std::int64_t>(n) ? json(std::get<std::int64_t>(n)) : json(std::get<double>(n));
}

json EvidenceVariable::to_json() const {
    json out = json::object();
    if (value) out["value"] = registry::to_json(*value);
    if (min) out["min"] = registry::to_json(*min);
    if (max) out["max"] = registry::to_json(*max);
    out["unit"] = unit;
    out["status"] = std::string(to_string(status));
    if (!source.empty()) out["source"] = source;
    if (!observed_at.empty()) out["observed_at"] = observed_at;
    if (!notes.empty()) out["notes"] = notes;
    return out;
}

std::optional<EvidenceVariable> parse_evidence_variable(const Node& node, JsonReader& reader) {
    if (!node.present() || !node.value->is_object()) {
        reader.fail(node, "an evidence variable object {value|min|max, unit, status, source}");
        return std::nullopt;
    }
    const std::size_t errors_before = reader.error_count();
    EvidenceVariable v;
    auto status_text = reader.string(node, "status");
    if (status_text) {
        auto status = parse_evidence_status(*status_text);
        if (!status) reader.fail(node.child("status"), "one of measured, confirmed, estimated, assumed, unknown");
        else v.status = *status;
    }
    if (auto unit = reader.string(node, "unit")) v.unit = *unit;
    if (auto s = reader.string(node, "source", Presence::optional)) v.source = *s;
    if (auto s = reader.string(node, "observed_at", Presence::optional)) v.observed_at = *s;
    if (auto s = reader.string(node, "notes", Presence::optional)) v.notes = *s;
    v.value = read_number(node, "value", reader);
    v.min = read_number(node, "min", reader);
    v.max = read_number(node, "max", reader);

    if (v.value && (v.min || v.max))
        reader.fail(node.child(v.min ? "min" : "max"), "no bounds beside `value` (a value excludes min and max)");
    if (v.min && v.max && less(*v.max, *v.min))
        reader.fail(node.child("max"), "a maximum no smaller than min " + render_short(registry::to_json(*v.min)));
    if (status_text && v.status == EvidenceStatus::estimated && !(v.min && v.max && less(*v.min, *v.max)))
        reader.fail(node, "an estimated variable with distinct `min` and `max`");
    if (status_text && v.status == EvidenceStatus::unknown && v.notes.empty())
        reader.fail(node.child("notes"), "notes saying why the variable is unknown");
    if (status_text && v.status != EvidenceStatus::unknown) {
        if (v.source.empty()) reader.fail(node.child("source"), "the source of a " + std::string(to_string(v.status)) + " variable");
        if (!v.value && !v.min && !v.max) reader.fail(node.child("value"), "a value or a bound for a known variable");
    }
    if (reader.error_count() != errors_before) return std::nullopt;
    return v;
}

}  // namespace anvil::registry
