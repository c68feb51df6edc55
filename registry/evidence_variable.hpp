// One numeric input with its evidence: a value or bounds, a unit, how it is known, and from where.
// Shared by every document that carries evidence (feasibility inputs, priors, local measurements).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "registry/json_reader.hpp"

namespace anvil::registry {

// How a number is known, strongest first. Only `measured` and `confirmed` count as proof.
enum class EvidenceStatus { measured, confirmed, estimated, assumed, unknown };

std::string_view to_string(EvidenceStatus s);
std::optional<EvidenceStatus> parse_evidence_status(std::string_view s);

// JSON integers stay exact (byte counts); anything with a fraction is a double (ratios, scores).
using Number = std::variant<std::int64_t, double>;
double to_double(const Number& n);
json to_json(const Number& n);

struct EvidenceVariable {
    std::optional<Number> value;
    std::optional<Number> min;
    std::optional<Number> max;
    std::string unit;
    EvidenceStatus status = EvidenceStatus::unknown;
    std::string source;
    std::string observed_at;
    std::string notes;

    bool is_proof() const { return status == EvidenceStatus::measured || status == EvidenceStatus::confirmed; }
    json to_json() const;
};

// Reads and validates the variable at `node`: `value` excludes `min`/`max`; `estimated` needs
// distinct `min` and `max`; numbers are non-negative with min ≤ max; `unknown` needs `notes`,
// every other status needs `source` and a value or a bound.
std::optional<EvidenceVariable> parse_evidence_variable(const Node& node, JsonReader& reader);

}  // namespace anvil::registry
