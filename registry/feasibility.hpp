// The feasibility calculator: from requirements, candidates and their evidence to one verdict per
// candidate, with the axes, figures and reasons behind it. Pure: no I/O, no clock, and the same
// input always gives the same result, so the daemon can re-run it whenever evidence changes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "registry/evidence_variable.hpp"
#include "registry/feasibility_input.hpp"
#include "registry/interval.hpp"

namespace anvil::registry {

inline constexpr std::string_view kFeasibilityResultSchema = "anvil-serving.recipe-feasibility-result/v1";

// Ratios compare with this much slack in the candidate's favour (see compare() in interval.hpp).
inline constexpr double kRatioTolerance = 1e-9;

enum class AxisName : std::uint8_t {
    context_limit,
    stable_context,
    memory,
    deterministic_correctness,
    quality,
    warm_e2e_speed,
    tasks_per_hour,
};
inline constexpr std::size_t kAxisCount = 7;
std::string_view to_string(AxisName a);
// Behaviour axes judge what the candidate does; only measured or confirmed inputs may decide them.
bool is_behaviour_axis(AxisName a);
// Memory and quality loss are at-most comparisons; every other axis is at-least.
Comparison comparison_of(AxisName a);

// `physical_fail` and `policy_fail` are the memory axis's two ways of failing. `not_measured` is
// the stable-context axis of a candidate whose document has no measured_max_stable_context_tokens:
// a measurement nobody made yet, which (as in anvil-serving's calculator) can only be asked for,
// never hold a verdict open.
enum class AxisStatus : std::uint8_t { pass, fail, physical_fail, policy_fail, unknown, not_measured };
std::string_view to_string(AxisStatus s);  // pass | fail | physical-fail | policy-fail | unknown | not-measured
inline bool fails(AxisStatus s) { return s == AxisStatus::fail || s == AxisStatus::physical_fail || s == AxisStatus::policy_fail; }

// The verdict classes, in the order the rules try them. `math_qualified` and `benchmark_survivor`
// mean "worth qualifying locally"; neither authorizes promotion.
enum class Verdict : std::uint8_t {
    empirically_disqualified,
    modeled_infeasible,
    proven_infeasible,
    policy_infeasible,
    requirements_disqualified,
    unresolved,
    math_qualified,
    benchmark_survivor,
};
std::string_view to_string(Verdict v);

// Where a variable sits in the input document, so a result can name it by JSON pointer.
enum class Slot : std::uint8_t {
    token,           // /requirements/tokens/<name>
    concurrency,     // /requirements/concurrency
    physical_vram,   // /requirements/physical_vram_bytes
    vram_reserve,    // /requirements/vram_reserves/<name>/variable
    threshold,       // /requirements/thresholds/<name>
    context_limit,   // /candidates/<i>/runtime_context_limit_tokens
    stable_context,  // /candidates/<i>/measured_max_stable_context_tokens
    resident,        // /candidates/<i>/resident_components/<name>
    per_sequence,    // /candidates/<i>/per_sequence_components/<name>
    per_token,       // /candidates/<i>/per_token_components/<name>
    kv_multiplier,   // /candidates/<i>/kv_token_multiplier
    metric,          // /candidates/<i>/metrics/<name>
};

// One variable the calculator read. Borrows from the input (or, for a variable the document lacks,
// from a static stand-in whose status is unknown): keep the input alive while the result is used.
struct VariableRef {
    const EvidenceVariable* variable = nullptr;
    Slot slot = Slot::token;
    std::string_view name;  // the key in its group; empty for single variables
    bool absent = false;    // not in the document, so counted as unknown
};
// "/candidates/0/per_token_components/x": the variable's JSON pointer in the input document.
std::string pointer(const VariableRef& ref, std::size_t candidate_index);
void append_pointer(std::string& out, const VariableRef& ref, std::size_t candidate_index);

using AnyInterval = std::variant<IntInterval, RatioInterval>;

struct Axis {
    AxisName name = AxisName::context_limit;
    AxisStatus status = AxisStatus::unknown;
    // A behaviour axis whose inputs are not all measured or confirmed stays unknown; this is the
    // status it would have if they were.
    std::optional<AxisStatus> projected_status;
    AnyInterval actual;  // compared with FeasibilityResult::required, the same for every candidate
    EvidenceStatus evidence = EvidenceStatus::unknown;  // the weakest status among its inputs
};

enum class UnknownReason : std::uint8_t { absent, status_unknown, no_lower_bound, no_upper_bound, not_proof };
std::string_view to_string(UnknownReason r);

// An input that keeps an axis unknown: measuring it is what could decide the axis. Reported only
// while the candidate is still in the running (unresolved, benchmark-survivor).
struct LoadBearingUnknown {
    AxisName axis;
    VariableRef variable;
    UnknownReason reason;
};

// A run of entries in one of FeasibilityResult's shared lists. Candidates keep their variable
// lists there rather than in vectors of their own: thousands of small allocations were most of
// the evaluation's cost.
struct Span {
    std::uint32_t first = 0;
    std::uint32_t count = 0;
};

struct CandidateResult {
    std::size_t index = 0;  // in FeasibilityInput::candidates
    std::string_view id;
    Verdict verdict = Verdict::unresolved;
    std::vector<std::string> reasons;
    std::array<Axis, kAxisCount> axes{};
    IntInterval demand;           // bytes
    IntInterval physical_margin;  // physical available − demand
    IntInterval policy_margin;    // policy available − demand
    IntInterval physical_t_max;   // tokens
    IntInterval policy_t_max;
    Span used;                   // the candidate's own variables, for the ledger
    Span missing_evidence;       // inputs with status unknown; their notes say what to do
    Span load_bearing_unknowns;  // see LoadBearingUnknown
    std::string arithmetic_error;  // set when exact arithmetic overflowed

    const Axis& axis(AxisName a) const { return axes[static_cast<std::size_t>(a)]; }
};

struct FeasibilityResult {
    std::string_view campaign;
    IntInterval t_req;               // tokens
    IntInterval physical_available;  // bytes
    IntInterval policy_available;
    // What each axis compares against: T_req for the context axes, policy available bytes for
    // memory, the thresholds for behaviour (missing when the requirements give none).
    std::array<AnyInterval, kAxisCount> required{};
    std::vector<VariableRef> requirement_variables;  // for the ledger
    std::vector<VariableRef> requirement_missing_evidence;
    std::vector<std::string> errors;  // requirement arithmetic that overflowed
    std::vector<CandidateResult> candidates;

    std::span<const VariableRef> used(const CandidateResult& c) const { return view(variables, c.used); }
    std::span<const VariableRef> missing_evidence(const CandidateResult& c) const { return view(missing, c.missing_evidence); }
    std::span<const LoadBearingUnknown> load_bearing_unknowns(const CandidateResult& c) const {
        return view(unknowns, c.load_bearing_unknowns);
    }

    // The shared lists the candidates' spans index.
    std::vector<VariableRef> variables;
    std::vector<VariableRef> missing;
    std::vector<LoadBearingUnknown> unknowns;

private:
    template <typename T>
    static std::span<const T> view(const std::vector<T>& list, Span s) {
        return std::span<const T>(list).subspan(s.first, s.count);
    }
};

// Evaluates every candidate of `input`. Never throws on document content: arithmetic that would
// overflow leaves the affected figures unknown and says so in `errors` or `arithmetic_error`.
FeasibilityResult evaluate_feasibility(const FeasibilityInput& input);

// The exact interval a variable states: `value` as both bounds, else `min` and `max`. A fractional
// number widens outward to whole units (floor the minimum, ceil the maximum). Throws
// ArithmeticOverflow for a number beyond 64 bits.
IntInterval to_int_interval(const EvidenceVariable& v);
RatioInterval to_ratio_interval(const EvidenceVariable& v);

}  // namespace anvil::registry
