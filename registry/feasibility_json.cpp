#include "registry/feasibility_json.hpp"

#include <charconv>
#include <cmath>

namespace anvil::registry {

namespace {

// Appends JSON tokens, placing commas itself: after a value or a closed container the next value
// or key needs one; after an opening bracket or a key it does not.
class Writer {
public:
    explicit Writer(std::string& out) : out_(out) {}

    Writer& begin_object() { return open('{'); }
    Writer& end_object() { return close('}'); }
    Writer& begin_array() { return open('['); }
    Writer& end_array() { return close(']'); }

    Writer& key(std::string_view k) {
        separate();
        quoted(k);
        out_ += ':';
        comma_ = false;
        return *this;
    }
    Writer& string(std::string_view s) {
        separate();
        quoted(s);
        comma_ = true;
        return *this;
    }
    Writer& integer(std::int64_t v) {
        separate();
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof buf, v);
        out_.append(buf, r.ptr);
        comma_ = true;
        return *this;
    }
    Writer& number(double v) {
        separate();
        if (!std::isfinite(v)) {
            out_ += "null";
        } else {
            char buf[32];
            auto r = std::to_chars(buf, buf + sizeof buf, v);
            out_.append(buf, r.ptr);
        }
        comma_ = true;
        return *this;
    }
    Writer& boolean(bool v) {
        separate();
        out_ += v ? "true" : "false";
        comma_ = true;
        return *this;
    }
    Writer& null() {
        separate();
        out_ += "null";
        comma_ = true;
        return *this;
    }
    Writer& number(const Number& n) {
        if (const auto* i = std::get_if<std::int64_t>(&n)) return integer(*i);
        return number(std::get<double>(n));
    }

private:
    Writer& open(char c) {
        separate();
        out_ += c;
        comma_ = false;
        return *this;
    }
    Writer& close(char c) {
        out_ += c;
        comma_ = true;
        return *this;
    }
    void separate() {
        if (comma_) out_ += ',';
    }
    void quoted(std::string_view s) {
        out_ += '"';
        std::size_t start = 0;
        for (std::size_t i = 0; i < s.size(); ++i) {
            const auto c = static_cast<unsigned char>(s[i]);
            if (c >= 0x20 && c != '"' && c != '\\') continue;
            out_.append(s.data() + start, i - start);
            start = i + 1;
            switch (c) {
                case '"': out_ += "\\\""; break;
                case '\\': out_ += "\\\\"; break;
                case '\n': out_ += "\\n"; break;
                case '\r': out_ += "\\r"; break;
                case '\t': out_ += "\\t"; break;
                default: {
                    static constexpr char kHex[] = "0123456789abcdef";
                    out_ += "\\u00";
                    out_ += kHex[c >> 4];
                    out_ += kHex[c & 15];
                }
            }
        }
        out_.append(s.data() + start, s.size() - start);
        out_ += '"';
    }

    std::string& out_;
    bool comma_ = false;
};

std::string_view comparison_name(Comparison c) { return c == Comparison::at_least ? "at-least" : "at-most"; }

std::string_view axis_unit(AxisName a) {
    switch (a) {
        case AxisName::context_limit:
        case AxisName::stable_context: return "tokens";
        case AxisName::memory: return "bytes";
        default: return "ratio";
    }
}

class ResultWriter {
public:
    ResultWriter(std::string& out) : w_(out) {}

    void write(const FeasibilityResult& r) {
        w_.begin_object();
        w_.key("schema").string(kFeasibilityResultSchema);
        w_.key("campaign").string(r.campaign);
        equations();
        w_.key("T_req");
        interval(r.t_req, "tokens");
        w_.key("physical_available_bytes");
        interval(r.physical_available);
        w_.key("policy_available_bytes");
        interval(r.policy_available);
        w_.key("errors").begin_array();
        for (const auto& e : r.errors) w_.string(e);
        w_.end_array();
        w_.key("missing_evidence");
        missing(r.missing_evidence, 0);
        w_.key("candidates").begin_array();
        for (const auto& c : r.candidates) candidate(c);
        w_.end_array();
        w_.key("ledger").begin_object();
        for (const auto& ref : r.used) ledger_entry(ref, 0);
        for (const auto& c : r.candidates)
            for (const auto& ref : c.used) ledger_entry(ref, c.index);
        w_.end_object();
        w_.end_object();
    }

private:
    void equations() {
        w_.key("equations").begin_object();
        w_.key("T_req").string("sum(requirements.tokens)");
        w_.key("physical_available").string("physical_vram_bytes - sum(vram_reserves of kind physical)");
        w_.key("policy_available").string("physical_vram_bytes - sum(all vram_reserves)");
        w_.key("demand").string(
            "sum(resident_components) + concurrency * sum(per_sequence_components) + T_req * kv_token_multiplier * "
            "sum(per_token_components)");
        w_.key("T_max").string(
            "floor((available - sum(resident_components) - concurrency * sum(per_sequence_components)) / "
            "(kv_token_multiplier * sum(per_token_components))), for physical and policy available");
        w_.key("relative_quality_loss").string("1 - quality_score / reference_quality_score");
        w_.key("warm_e2e_gain").string("1 - warm_e2e_seconds / no_spec_warm_e2e_seconds");
        w_.key("tasks_per_hour_ratio").string("successful_tasks_per_hour / reference_tasks_per_hour");
        w_.end_object();
    }

    template <typename T>
    void bound(const std::optional<T>& b) {
        if (!b) w_.null();
        else if constexpr (std::is_same_v<T, double>) w_.number(*b);
        else w_.integer(*b);
    }

    void interval(const IntInterval& i, std::string_view unit = "bytes") {
        w_.begin_object();
        w_.key("min");
        bound(i.min);
        w_.key("max");
        bound(i.max);
        w_.key("unit").string(unit);
        w_.end_object();
    }

    void any_interval(const AnyInterval& any, std::string_view unit) {
        if (const auto* i = std::get_if<IntInterval>(&any)) return interval(*i, unit);
        const auto& r = std::get<RatioInterval>(any);
        w_.begin_object();
        w_.key("min");
        bound(r.min);
        w_.key("max");
        bound(r.max);
        w_.key("unit").string(unit);
        w_.end_object();
    }

    void pointer_value(const VariableRef& ref, std::size_t index) {
        scratch_.clear();
        append_pointer(scratch_, ref, index);
        w_.string(scratch_);
    }

    void missing(const std::vector<VariableRef>& refs, std::size_t index) {
        w_.begin_array();
        for (const auto& ref : refs) {
            w_.begin_object();
            w_.key("variable");
            pointer_value(ref, index);
            w_.key("notes").string(ref.variable->notes);
            w_.end_object();
        }
        w_.end_array();
    }

    void candidate(const CandidateResult& c) {
        w_.begin_object();
        w_.key("id").string(c.id);
        w_.key("class").string(to_string(c.verdict));
        w_.key("reasons").begin_array();
        for (const auto& reason : c.reasons) w_.string(reason);
        w_.end_array();
        w_.key("axes").begin_object();
        for (const auto& a : c.axes) {
            w_.key(to_string(a.name)).begin_object();
            w_.key("status").string(to_string(a.status));
            if (a.projected_status) w_.key("projected_status").string(to_string(*a.projected_status));
            w_.key("comparison").string(comparison_name(a.comparison));
            w_.key("actual");
            any_interval(a.actual, axis_unit(a.name));
            w_.key("required");
            any_interval(a.required, axis_unit(a.name));
            w_.key("evidence").string(to_string(a.evidence));
            w_.end_object();
        }
        w_.end_object();
        w_.key("demand_bytes");
        interval(c.demand);
        w_.key("physical_margin_bytes");
        interval(c.physical_margin);
        w_.key("policy_margin_bytes");
        interval(c.policy_margin);
        w_.key("T_max").begin_object();
        w_.key("physical");
        interval(c.physical_t_max, "tokens");
        w_.key("policy");
        interval(c.policy_t_max, "tokens");
        w_.end_object();
        w_.key("load_bearing_unknowns").begin_array();
        for (const auto& u : c.load_bearing_unknowns) {
            w_.begin_object();
            w_.key("axis").string(to_string(u.axis));
            w_.key("variable");
            pointer_value(u.variable, c.index);
            w_.key("reason").string(to_string(u.reason));
            w_.end_object();
        }
        w_.end_array();
        w_.key("missing_evidence");
        missing(c.missing_evidence, c.index);
        if (!c.arithmetic_error.empty()) w_.key("arithmetic_error").string(c.arithmetic_error);
        w_.end_object();
    }

    void ledger_entry(const VariableRef& ref, std::size_t index) {
        scratch_.clear();
        append_pointer(scratch_, ref, index);
        w_.key(scratch_);
        const EvidenceVariable& v = *ref.variable;
        w_.begin_object();
        if (v.value) w_.key("value").number(*v.value);
        if (v.min) w_.key("min").number(*v.min);
        if (v.max) w_.key("max").number(*v.max);
        w_.key("unit").string(v.unit);
        w_.key("status").string(to_string(v.status));
        if (!v.source.empty()) w_.key("source").string(v.source);
        if (!v.observed_at.empty()) w_.key("observed_at").string(v.observed_at);
        if (!v.notes.empty()) w_.key("notes").string(v.notes);
        if (ref.absent) w_.key("absent").boolean(true);
        w_.end_object();
    }

    Writer w_;
    std::string scratch_;
};

}  // namespace

void append_feasibility_json(std::string& out, const FeasibilityResult& result) { ResultWriter(out).write(result); }

std::string feasibility_json(const FeasibilityResult& result) {
    std::string out;
    // About 2 KiB a candidate with its ledger; one reservation saves the doubling copies.
    out.reserve(4096 + result.candidates.size() * 2048);
    append_feasibility_json(out, result);
    return out;
}

}  // namespace anvil::registry
