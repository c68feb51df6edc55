#include "registry/feasibility.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace anvil::registry {

namespace {

// A document that leaves a variable out says nothing about it: these stand in, status unknown.
const EvidenceVariable& absent_variable() {
    static const EvidenceVariable v = [] {
        EvidenceVariable e;
        e.status = EvidenceStatus::unknown;
        e.notes = "Not in the document, so unknown; add it with its evidence.";
        return e;
    }();
    return v;
}

const EvidenceVariable& absent_multiplier() {
    static const EvidenceVariable v = [] {
        EvidenceVariable e;
        e.status = EvidenceStatus::unknown;
        e.unit = "copies";
        e.notes = "Not in the document. A missing KV multiplier is unknown, never 1.";
        return e;
    }();
    return v;
}

// EvidenceStatus lists the strongest first, so the weaker of two is the later one.
EvidenceStatus weaker(EvidenceStatus a, EvidenceStatus b) { return std::max(a, b); }
bool is_proof(EvidenceStatus s) { return s == EvidenceStatus::measured || s == EvidenceStatus::confirmed; }

bool unknown_or_unbounded(const EvidenceVariable& v) {
    return v.status == EvidenceStatus::unknown || (!v.value && !(v.min && v.max));
}

std::optional<UnknownReason> why_unknown(const VariableRef& r, bool behaviour) {
    if (r.absent) return UnknownReason::absent;
    const EvidenceVariable& v = *r.variable;
    if (v.status == EvidenceStatus::unknown) return UnknownReason::status_unknown;
    if (!v.value && !v.min) return UnknownReason::no_lower_bound;
    if (!v.value && !v.max) return UnknownReason::no_upper_bound;
    if (behaviour && !v.is_proof()) return UnknownReason::not_proof;
    return std::nullopt;
}

const EvidenceVariable* find(const NamedVariables& vars, std::string_view name) {
    for (const auto& [key, v] : vars)
        if (key == name) return &v;
    return nullptr;
}

AxisStatus from(Outcome o) {
    switch (o) {
        case Outcome::pass: return AxisStatus::pass;
        case Outcome::fail: return AxisStatus::fail;
        case Outcome::unknown: return AxisStatus::unknown;
    }
    return AxisStatus::unknown;
}

std::size_t at(AxisName a) { return static_cast<std::size_t>(a); }

std::int64_t whole(const Number& n, bool lower) {
    if (const auto* i = std::get_if<std::int64_t>(&n)) return *i;
    const double d = std::get<double>(n);
    const double w = lower ? std::floor(d) : std::ceil(d);
    // ±2^63 are exact doubles; the int64 range is [−2^63, 2^63).
    if (!(w >= -9223372036854775808.0 && w < 9223372036854775808.0))
        throw ArithmeticOverflow(to_string(d) + " does not fit in 64 bits");
    return static_cast<std::int64_t>(w);
}

// T_max: how many tokens' bytes fit in `room` (available bytes less the fixed demand). No token
// fits in less than no room, whatever a token costs, so a negative room is 0 tokens, not a negative
// count (as in anvil-serving's calculator).
IntInterval tokens_that_fit(IntInterval room, const IntInterval& token_bytes) {
    if (room.max && *room.max < 0) return IntInterval::exact(0);
    if (room.min && *room.min < 0) room.min = 0;
    return floor_divide(room, token_bytes);
}

struct BehaviourSpec {
    AxisName axis;
    std::string_view threshold;
    std::string_view numerator;
    std::string_view denominator;  // empty: the numerator is the figure itself
    bool one_minus;                // the figure is 1 − numerator / denominator
    std::string_view figure;       // what the figure is called in reasons
};

constexpr std::array<BehaviourSpec, 4> kBehaviour{{
    {AxisName::deterministic_correctness, "min_deterministic_pass_rate", "deterministic_pass_rate", "",
     false, "deterministic pass rate"},
    {AxisName::quality, "max_relative_quality_loss", "quality_score", "reference_quality_score", true,
     "relative quality loss"},
    {AxisName::warm_e2e_speed, "min_warm_e2e_gain", "warm_e2e_seconds", "no_spec_warm_e2e_seconds", true,
     "warm e2e gain"},
    {AxisName::tasks_per_hour, "min_tasks_per_hour_ratio", "successful_tasks_per_hour",
     "reference_tasks_per_hour", false, "tasks-per-hour ratio"},
}};

// What every candidate shares: the requirement side of each equation, computed once.
struct Shared {
    IntInterval t_req;
    IntInterval concurrency;
    IntInterval physical_available;
    IntInterval policy_available;
    std::vector<VariableRef> token_inputs;
    std::vector<VariableRef> memory_inputs;  // tokens, concurrency, VRAM, reserves
    std::array<std::optional<VariableRef>, kBehaviour.size()> thresholds;
    std::array<RatioInterval, kBehaviour.size()> threshold_values;
};

Shared prepare(const FeasibilityInput& in, FeasibilityResult& out) {
    const Requirements& q = in.requirements;
    Shared s;
    auto use = [&](const EvidenceVariable& v, Slot slot, std::string_view name) {
        VariableRef r{&v, slot, name, false};
        out.requirement_variables.push_back(r);
        return r;
    };
    for (const auto& [name, v] : q.tokens) s.token_inputs.push_back(use(v, Slot::token, name));
    s.memory_inputs = s.token_inputs;
    s.memory_inputs.push_back(use(q.concurrency, Slot::concurrency, {}));
    s.memory_inputs.push_back(use(q.physical_vram_bytes, Slot::physical_vram, {}));
    for (const auto& reserve : q.vram_reserves) s.memory_inputs.push_back(use(reserve.amount, Slot::vram_reserve, reserve.name));
    for (std::size_t i = 0; i < kBehaviour.size(); ++i)
        if (const auto* v = find(q.thresholds, kBehaviour[i].threshold)) s.thresholds[i] = use(*v, Slot::threshold, kBehaviour[i].threshold);
    for (const auto& r : out.requirement_variables)
        if (r.variable->status == EvidenceStatus::unknown) out.requirement_missing_evidence.push_back(r);

    try {
        s.t_req = IntInterval::exact(0);  // the empty sum is exactly zero, not a missing bound
        for (const auto& r : s.token_inputs) s.t_req = s.t_req + to_int_interval(*r.variable);
    } catch (const ArithmeticOverflow& e) {
        s.t_req = {};
        out.errors.push_back(std::string("T_req: ") + e.what());
    }
    try {
        s.concurrency = to_int_interval(q.concurrency);
    } catch (const ArithmeticOverflow& e) {
        out.errors.push_back(std::string("concurrency: ") + e.what());
    }
    try {
        IntInterval physical_reserves = IntInterval::exact(0), all_reserves = IntInterval::exact(0);
        for (const auto& reserve : q.vram_reserves) {
            const IntInterval amount = to_int_interval(reserve.amount);
            all_reserves = all_reserves + amount;
            if (reserve.kind == ReserveKind::physical) physical_reserves = physical_reserves + amount;
        }
        const IntInterval vram = to_int_interval(q.physical_vram_bytes);
        s.physical_available = vram - physical_reserves;
        s.policy_available = vram - all_reserves;
    } catch (const ArithmeticOverflow& e) {
        s.physical_available = s.policy_available = {};
        out.errors.push_back(std::string("available VRAM: ") + e.what());
    }
    for (std::size_t i = 0; i < kBehaviour.size(); ++i) {
        if (s.thresholds[i]) s.threshold_values[i] = to_ratio_interval(*s.thresholds[i]->variable);
        out.required[at(kBehaviour[i].axis)] = s.threshold_values[i];
    }
    out.t_req = s.t_req;
    out.physical_available = s.physical_available;
    out.policy_available = s.policy_available;
    out.required[at(AxisName::context_limit)] = s.t_req;
    out.required[at(AxisName::stable_context)] = s.t_req;
    out.required[at(AxisName::memory)] = s.policy_available;
    return s;
}

class CandidateEvaluator {
public:
    CandidateEvaluator(const Shared& s, const FeasibilityCandidate& c, CandidateResult& r, FeasibilityResult& out)
        : s_(s), c_(c), r_(r), out_(out) {}

    void run() {
        r_.used.first = static_cast<std::uint32_t>(out_.variables.size());
        r_.load_bearing_unknowns.first = static_cast<std::uint32_t>(out_.unknowns.size());
        for (std::size_t i = 0; i < kAxisCount; ++i) r_.axes[i].name = static_cast<AxisName>(i);
        context_axis(AxisName::context_limit, c_.runtime_context_limit_tokens, Slot::context_limit);
        context_axis(AxisName::stable_context, c_.measured_max_stable_context_tokens, Slot::stable_context);
        memory_axis();
        for (std::size_t i = 0; i < kBehaviour.size(); ++i) behaviour_axis(i);
        r_.used.count = static_cast<std::uint32_t>(out_.variables.size()) - r_.used.first;
        r_.missing_evidence.first = static_cast<std::uint32_t>(out_.missing.size());
        for (const auto& u : out_.used(r_))
            if (u.variable->status == EvidenceStatus::unknown) out_.missing.push_back(u);
        r_.missing_evidence.count = static_cast<std::uint32_t>(out_.missing.size()) - r_.missing_evidence.first;
        r_.load_bearing_unknowns.count = static_cast<std::uint32_t>(out_.unknowns.size()) - r_.load_bearing_unknowns.first;
        decide();
        // Once a failure has ruled the candidate out, no measurement can bring it back.
        if (r_.verdict != Verdict::unresolved && r_.verdict != Verdict::benchmark_survivor && r_.verdict != Verdict::math_qualified) {
            out_.unknowns.resize(r_.load_bearing_unknowns.first);
            r_.load_bearing_unknowns.count = 0;
        }
    }

private:
    VariableRef use(const EvidenceVariable* v, Slot slot, std::string_view name,
                    const EvidenceVariable& stand_in = absent_variable()) {
        VariableRef ref{v ? v : &stand_in, slot, name, v == nullptr};
        out_.variables.push_back(ref);
        return ref;
    }

    Axis& axis(AxisName a) { return r_.axes[at(a)]; }

    void note_arithmetic_error(std::string_view where, const ArithmeticOverflow& e) {
        if (!r_.arithmetic_error.empty()) r_.arithmetic_error += "; ";
        r_.arithmetic_error += std::string(where) + ": " + e.what();
    }

    // The requirement's memory inputs, then the candidate's (read back from its variables so far).
    template <typename F>
    void each_memory_input(F f) const {
        for (const auto& ref : s_.memory_inputs) f(ref);
        for (std::size_t i = r_.used.first; i < out_.variables.size(); ++i) {
            const VariableRef& ref = out_.variables[i];
            if (ref.slot == Slot::resident || ref.slot == Slot::per_sequence || ref.slot == Slot::per_token ||
                ref.slot == Slot::kv_multiplier)
                f(ref);
        }
    }

    void note_unknowns(AxisName a, const VariableRef& ref, bool behaviour) {
        if (auto why = why_unknown(ref, behaviour)) out_.unknowns.push_back({a, ref, *why});
    }

    void context_axis(AxisName name, const std::optional<EvidenceVariable>& limit, Slot slot) {
        const VariableRef ref = use(limit ? &*limit : nullptr, slot, {});
        Axis& a = axis(name);
        // The verdict classes a context failure by the limit's own evidence, not by T_req's.
        a.evidence = ref.variable->status;
        try {
            const IntInterval actual = to_int_interval(*ref.variable);
            a.actual = actual;
            a.status = from(compare(actual, Comparison::at_least, s_.t_req));
        } catch (const ArithmeticOverflow& e) {
            note_arithmetic_error(to_string(name), e);
        }
        if (name == AxisName::stable_context && !limit) a.status = AxisStatus::not_measured;
        if (a.status != AxisStatus::unknown && a.status != AxisStatus::not_measured) return;
        note_unknowns(name, ref, false);
        for (const auto& t : s_.token_inputs) note_unknowns(name, t, false);
    }

    IntInterval sum(const NamedVariables& vars, Slot slot) {
        IntInterval total = IntInterval::exact(0);
        for (const auto& [name, v] : vars) {
            use(&v, slot, name);
            total = total + to_int_interval(v);
        }
        return total;
    }

    void memory_axis() {
        Axis& a = axis(AxisName::memory);
        const VariableRef multiplier =
            use(c_.kv_token_multiplier ? &*c_.kv_token_multiplier : nullptr, Slot::kv_multiplier, {}, absent_multiplier());
        try {
            const IntInterval resident = sum(c_.resident_components, Slot::resident);
            const IntInterval per_sequence = sum(c_.per_sequence_components, Slot::per_sequence);
            const IntInterval per_token = sum(c_.per_token_components, Slot::per_token);
            const IntInterval token_bytes = to_int_interval(*multiplier.variable) * per_token;
            const IntInterval sequence_part = s_.concurrency * per_sequence;
            r_.demand = resident + sequence_part + s_.t_req * token_bytes;
            r_.physical_margin = s_.physical_available - r_.demand;
            r_.policy_margin = s_.policy_available - r_.demand;
            r_.physical_t_max = tokens_that_fit(s_.physical_available - resident - sequence_part, token_bytes);
            r_.policy_t_max = tokens_that_fit(s_.policy_available - resident - sequence_part, token_bytes);
        } catch (const ArithmeticOverflow& e) {
            r_.demand = r_.physical_margin = r_.policy_margin = r_.physical_t_max = r_.policy_t_max = {};
            note_arithmetic_error("memory", e);
        }
        a.actual = r_.demand;

        EvidenceStatus evidence = EvidenceStatus::measured;
        each_memory_input([&](const VariableRef& ref) {
            evidence = weaker(evidence, ref.variable->status);
            memory_unresolved_ = memory_unresolved_ || unknown_or_unbounded(*ref.variable);
        });
        a.evidence = evidence;

        if (compare(r_.demand, Comparison::at_most, s_.physical_available) == Outcome::fail) a.status = AxisStatus::physical_fail;
        else if (compare(r_.demand, Comparison::at_most, s_.policy_available) == Outcome::fail) a.status = AxisStatus::policy_fail;
        else a.status = from(compare(r_.demand, Comparison::at_most, s_.policy_available));
        if (a.status != AxisStatus::unknown) return;
        each_memory_input([&](const VariableRef& ref) { note_unknowns(AxisName::memory, ref, false); });
    }

    void behaviour_axis(std::size_t i) {
        const BehaviourSpec& spec = kBehaviour[i];
        Axis& a = axis(spec.axis);
        const VariableRef numerator = use(find(c_.metrics, spec.numerator), Slot::metric, spec.numerator);
        RatioInterval actual = to_ratio_interval(*numerator.variable);
        EvidenceStatus evidence = numerator.variable->status;
        std::optional<VariableRef> denominator;
        if (!spec.denominator.empty()) {
            denominator = use(find(c_.metrics, spec.denominator), Slot::metric, spec.denominator);
            actual = actual / to_ratio_interval(*denominator->variable);
            evidence = weaker(evidence, denominator->variable->status);
        }
        if (spec.one_minus) actual = one_minus(actual);
        const auto& threshold = s_.thresholds[i];
        const RatioInterval& required = s_.threshold_values[i];
        a.actual = actual;
        a.evidence = evidence;
        const AxisStatus status = from(compare(actual, comparison_of(spec.axis), required, kRatioTolerance));
        if (is_proof(evidence)) {
            a.status = status;
        } else {
            a.status = AxisStatus::unknown;
            a.projected_status = status;
        }
        if (a.status != AxisStatus::unknown) return;
        note_unknowns(spec.axis, numerator, true);
        if (denominator) note_unknowns(spec.axis, *denominator, true);
        if (threshold) note_unknowns(spec.axis, *threshold, false);
        else out_.unknowns.push_back({spec.axis, VariableRef{&absent_variable(), Slot::threshold, spec.threshold, true},
                                                 UnknownReason::absent});
    }

    // The load-bearing inputs of one axis, as "pointer (reason)" for a reason line.
    std::string unknowns_of(AxisName a) const {
        std::string out;
        for (const auto& u : out_.load_bearing_unknowns(r_)) {
            if (u.axis != a) continue;
            out += out.empty() ? "" : ", ";
            out += pointer(u.variable, r_.index) + " (" + std::string(to_string(u.reason)) + ")";
        }
        return out;
    }

    std::string context_reason(AxisName name) const {
        const Axis& a = r_.axis(name);
        return std::string(name == AxisName::context_limit ? "runtime context limit " : "measured stable context ") +
               to_string(std::get<IntInterval>(a.actual)) + " < T_req " + to_string(s_.t_req) + " tokens (" +
               std::string(registry::to_string(a.evidence)) + ")";
    }

    std::string behaviour_reason(const BehaviourSpec& spec) const {
        const Axis& a = r_.axis(spec.axis);
        return std::string(to_string(spec.axis)) + ": " + std::string(spec.figure) + " " + to_string(std::get<RatioInterval>(a.actual)) +
               (comparison_of(spec.axis) == Comparison::at_least ? " below the required " : " above the allowed ") +
               to_string(s_.threshold_values[static_cast<std::size_t>(&spec - kBehaviour.data())]);
    }

    std::string memory_reason(bool physical) const {
        return "demand " + to_string(r_.demand) + " bytes exceeds " + (physical ? "physical" : "policy") + " available " +
               to_string(physical ? s_.physical_available : s_.policy_available) + " bytes";
    }

    // Names the estimated or assumed memory inputs behind a modelled memory failure.
    std::string modelled_memory_inputs() const {
        std::string out;
        auto add = [&](const VariableRef& ref) {
            if (is_proof(ref.variable->status)) return;
            out += out.empty() ? "" : ", ";
            out += pointer(ref, r_.index) + " (" + std::string(registry::to_string(ref.variable->status)) + ")";
        };
        each_memory_input(add);
        return out;
    }

    std::string unresolved_memory_inputs() const {
        std::string out;
        auto add = [&](const VariableRef& ref) {
            if (!unknown_or_unbounded(*ref.variable)) return;
            out += out.empty() ? "" : ", ";
            out += pointer(ref, r_.index);
        };
        each_memory_input(add);
        return out;
    }

    void decide() {
        auto& reasons = r_.reasons;
        const Axis& stable = r_.axis(AxisName::stable_context);
        const Axis& context = r_.axis(AxisName::context_limit);
        const Axis& memory = r_.axis(AxisName::memory);
        const bool stable_fail = stable.status == AxisStatus::fail;

        if (!c_.hard_failures.empty() || (stable_fail && is_proof(stable.evidence))) {
            r_.verdict = Verdict::empirically_disqualified;
            for (const auto& f : c_.hard_failures) reasons.push_back(f);
            if (stable_fail && is_proof(stable.evidence)) reasons.push_back(context_reason(AxisName::stable_context));
            return;
        }
        if (stable_fail) {
            r_.verdict = stable.evidence == EvidenceStatus::unknown ? Verdict::unresolved : Verdict::modeled_infeasible;
            reasons.push_back(context_reason(AxisName::stable_context));
            return;
        }
        if (context.status == AxisStatus::fail) {
            r_.verdict = is_proof(context.evidence)                    ? Verdict::proven_infeasible
                         : context.evidence == EvidenceStatus::unknown ? Verdict::unresolved
                                                                       : Verdict::modeled_infeasible;
            reasons.push_back(context_reason(AxisName::context_limit));
            return;
        }
        if (memory.status == AxisStatus::physical_fail) {
            reasons.push_back(memory_reason(true));
            if (memory_unresolved_) {
                r_.verdict = Verdict::unresolved;
                reasons.push_back("memory inputs unknown or unbounded: " + unresolved_memory_inputs());
            } else if (!is_proof(memory.evidence)) {
                r_.verdict = Verdict::modeled_infeasible;
                reasons.push_back("memory inputs estimated or assumed: " + modelled_memory_inputs());
            } else {
                r_.verdict = Verdict::proven_infeasible;
            }
            return;
        }
        if (memory.status == AxisStatus::policy_fail) {
            reasons.push_back(memory_reason(false));
            if (memory_unresolved_) {
                r_.verdict = Verdict::unresolved;
                reasons.push_back("memory inputs unknown or unbounded: " + unresolved_memory_inputs());
            } else {
                r_.verdict = Verdict::policy_infeasible;
            }
            return;
        }
        for (const auto& spec : kBehaviour) {
            if (r_.axis(spec.axis).status == AxisStatus::fail) reasons.push_back(behaviour_reason(spec));
        }
        if (!reasons.empty()) {
            r_.verdict = Verdict::requirements_disqualified;
            return;
        }
        // As in the peer calculator, only the runtime limit and memory hold a verdict open: a stable
        // context that is unknown or never measured can only fail once measured (rules 1 and 2), so it
        // is evidence to gather, named below, not a reason to stop.
        for (AxisName a : {AxisName::context_limit, AxisName::memory}) {
            if (r_.axis(a).status != AxisStatus::unknown) continue;
            std::string why = unknowns_of(a);
            reasons.push_back(std::string(to_string(a)) + " unknown: " + (why.empty() ? "the bounds straddle the requirement" : why));
        }
        if (!r_.arithmetic_error.empty()) reasons.push_back("exact arithmetic failed (check the units): " + r_.arithmetic_error);
        if (!reasons.empty()) {
            r_.verdict = Verdict::unresolved;
            return;
        }
        std::string unproven;
        for (const auto& spec : kBehaviour) {
            const Axis& a = r_.axis(spec.axis);
            if (a.status == AxisStatus::pass) continue;
            unproven += unproven.empty() ? "" : ", ";
            unproven += std::string(to_string(spec.axis)) + " (projected " +
                        std::string(to_string(a.projected_status.value_or(AxisStatus::unknown))) + ")";
        }
        if (unproven.empty()) {
            r_.verdict = Verdict::math_qualified;
            reasons.push_back(stable.status == AxisStatus::pass ? "every axis passes on paper"
                                                                 : "the runtime limit, memory and every behaviour axis pass on paper");
        } else {
            r_.verdict = Verdict::benchmark_survivor;
            reasons.push_back("context limit and memory pass on paper; behaviour not proven: " + unproven);
        }
        if (stable.status == AxisStatus::not_measured) {
            reasons.push_back("stable context not measured: measure " + pointer(VariableRef{nullptr, Slot::stable_context, {}, true}, r_.index) + " at T_req " +
                              to_string(s_.t_req) + " tokens");
        } else if (stable.status == AxisStatus::unknown) {
            const std::string why = unknowns_of(AxisName::stable_context);
            reasons.push_back("stable_context unknown: " + (why.empty() ? "the bounds straddle the requirement" : why));
        }
        reasons.push_back("only local qualification authorizes promotion");
    }

    const Shared& s_;
    const FeasibilityCandidate& c_;
    CandidateResult& r_;
    FeasibilityResult& out_;
    bool memory_unresolved_ = false;  // a memory input is unknown or unbounded
};

}  // namespace

std::string_view to_string(AxisName a) {
    switch (a) {
        case AxisName::context_limit: return "context_limit";
        case AxisName::stable_context: return "stable_context";
        case AxisName::memory: return "memory";
        case AxisName::deterministic_correctness: return "deterministic_correctness";
        case AxisName::quality: return "quality";
        case AxisName::warm_e2e_speed: return "warm_e2e_speed";
        case AxisName::tasks_per_hour: return "tasks_per_hour";
    }
    return "?";
}

bool is_behaviour_axis(AxisName a) {
    return a == AxisName::deterministic_correctness || a == AxisName::quality || a == AxisName::warm_e2e_speed ||
           a == AxisName::tasks_per_hour;
}

Comparison comparison_of(AxisName a) {
    return a == AxisName::memory || a == AxisName::quality ? Comparison::at_most : Comparison::at_least;
}

std::string_view to_string(AxisStatus s) {
    switch (s) {
        case AxisStatus::pass: return "pass";
        case AxisStatus::fail: return "fail";
        case AxisStatus::physical_fail: return "physical-fail";
        case AxisStatus::policy_fail: return "policy-fail";
        case AxisStatus::unknown: return "unknown";
        case AxisStatus::not_measured: return "not-measured";
    }
    return "unknown";
}

std::string_view to_string(Verdict v) {
    switch (v) {
        case Verdict::empirically_disqualified: return "empirically-disqualified";
        case Verdict::modeled_infeasible: return "modeled-infeasible";
        case Verdict::proven_infeasible: return "proven-infeasible";
        case Verdict::policy_infeasible: return "policy-infeasible";
        case Verdict::requirements_disqualified: return "requirements-disqualified";
        case Verdict::unresolved: return "unresolved";
        case Verdict::math_qualified: return "math-qualified";
        case Verdict::benchmark_survivor: return "benchmark-survivor";
    }
    return "unresolved";
}

std::string_view to_string(UnknownReason r) {
    switch (r) {
        case UnknownReason::absent: return "absent";
        case UnknownReason::status_unknown: return "status unknown";
        case UnknownReason::no_lower_bound: return "no lower bound";
        case UnknownReason::no_upper_bound: return "no upper bound";
        case UnknownReason::not_proof: return "not measured or confirmed";
    }
    return "?";
}

void append_pointer(std::string& out, const VariableRef& ref, std::size_t candidate_index) {
    auto candidate = [&](std::string_view field) {
        char digits[24];
        out += "/candidates/";
        out.append(digits, std::to_chars(digits, digits + sizeof digits, candidate_index).ptr);
        out += field;
    };
    switch (ref.slot) {
        case Slot::token: out += "/requirements/tokens/"; break;
        case Slot::concurrency: out += "/requirements/concurrency"; return;
        case Slot::physical_vram: out += "/requirements/physical_vram_bytes"; return;
        case Slot::vram_reserve: out += "/requirements/vram_reserves/"; break;
        case Slot::threshold: out += "/requirements/thresholds/"; break;
        case Slot::context_limit: candidate("/runtime_context_limit_tokens"); return;
        case Slot::stable_context: candidate("/measured_max_stable_context_tokens"); return;
        case Slot::resident: candidate("/resident_components/"); break;
        case Slot::per_sequence: candidate("/per_sequence_components/"); break;
        case Slot::per_token: candidate("/per_token_components/"); break;
        case Slot::kv_multiplier: candidate("/kv_token_multiplier"); return;
        case Slot::metric: candidate("/metrics/"); break;
    }
    const bool plain = std::none_of(ref.name.begin(), ref.name.end(), [](char c) { return c == '~' || c == '/'; });
    if (plain) out += ref.name;
    else out += escape_pointer_token(ref.name);
    if (ref.slot == Slot::vram_reserve) out += "/variable";
}

std::string pointer(const VariableRef& ref, std::size_t candidate_index) {
    std::string out;
    append_pointer(out, ref, candidate_index);
    return out;
}

IntInterval to_int_interval(const EvidenceVariable& v) {
    if (v.value) return {whole(*v.value, true), whole(*v.value, false)};
    IntInterval out;
    if (v.min) out.min = whole(*v.min, true);
    if (v.max) out.max = whole(*v.max, false);
    return out;
}

RatioInterval to_ratio_interval(const EvidenceVariable& v) {
    if (v.value) return RatioInterval::exact(to_double(*v.value));
    RatioInterval out;
    if (v.min) out.min = to_double(*v.min);
    if (v.max) out.max = to_double(*v.max);
    return out;
}

FeasibilityResult evaluate_feasibility(const FeasibilityInput& input) {
    FeasibilityResult out;
    out.campaign = input.campaign;
    const Shared shared = prepare(input, out);
    const std::size_t n = input.candidates.size();
    out.candidates.resize(n);
    out.variables.reserve(n * 16);  // 7 metrics, 2 context limits, a multiplier, a few components
    out.missing.reserve(n * 4);
    out.unknowns.reserve(n * 4);
    for (std::size_t i = 0; i < n; ++i) {
        CandidateResult& r = out.candidates[i];
        r.index = i;
        r.id = input.candidates[i].id;
        CandidateEvaluator(shared, input.candidates[i], r, out).run();
    }
    return out;
}

}  // namespace anvil::registry
