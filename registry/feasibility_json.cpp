#include "registry/feasibility_json.hpp"

#include <algorithm>
#include <charconv>
#include <array>
#include <cmath>
#include <cstring>

namespace anvil::registry {

namespace {

// Appends JSON tokens, placing commas itself: after a value or a closed container the next value
// or key needs one; after an opening bracket or a key it does not. Writes through a raw cursor
// into `out`, grown ahead of need, because per-character std::string appends dominated the cost.
//
// With a sink, the buffer is a window instead: when it fills, what it holds goes to the sink and
// the window starts again, so the output never lives in memory whole (tens of MB for a large
// campaign, whose first touch of fresh pages cost more than writing it).
class Writer {
public:
    explicit Writer(std::string& out, const JsonSink* sink = nullptr, std::size_t window = 0)
        : out_(out), base_(out.size()), sink_(sink), window_(window) {
        const std::size_t want = sink_ ? base_ + window_ : out_.capacity() > base_ + 4096 ? out_.capacity() : base_ + 65536;
        out_.resize(want);
        p_ = out_.data() + base_;
        end_ = out_.data() + out_.size();
    }
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;
    // Trims `out` to what was written (with a sink: what is still in the window).
    ~Writer() { out_.resize(static_cast<std::size_t>(p_ - out_.data())); }

    // Hands what the window holds to the sink.
    void flush() {
        if (!sink_ || p_ == out_.data() + base_) return;
        (*sink_)(std::string_view(out_.data() + base_, static_cast<std::size_t>(p_ - (out_.data() + base_))));
        p_ = out_.data() + base_;
    }

    Writer& begin_object() { return open('{'); }
    Writer& end_object() { return close('}'); }
    Writer& begin_array() { return open('['); }
    Writer& end_array() { return close(']'); }

    // `k` is one of this file's own names, which need no escaping.
    Writer& key(std::string_view k) {
        room(k.size() + 4);
        if (comma_) *p_++ = ',';
        *p_++ = '"';
        copy(k);
        *p_++ = '"';
        *p_++ = ':';
        comma_ = false;
        return *this;
    }
    // A key that comes from the input document.
    Writer& quoted_key(std::string_view k) {
        string(k);
        room(1);
        *p_++ = ':';
        comma_ = false;
        return *this;
    }
    Writer& string(std::string_view s) {
        room(s.size() * 6 + 3);
        if (comma_) *p_++ = ',';
        quoted(s);
        comma_ = true;
        return *this;
    }
    Writer& integer(std::int64_t v) {
        room(24);
        if (comma_) *p_++ = ',';
        p_ = std::to_chars(p_, end_, v).ptr;
        comma_ = true;
        return *this;
    }
    Writer& number(double v) {
        if (!std::isfinite(v)) return literal("null");
        room(32);
        if (comma_) *p_++ = ',';
        p_ = std::to_chars(p_, end_, v).ptr;
        comma_ = true;
        return *this;
    }
    Writer& number(const Number& n) {
        if (const auto* i = std::get_if<std::int64_t>(&n)) return integer(*i);
        return number(std::get<double>(n));
    }
    Writer& boolean(bool v) { return literal(v ? "true" : "false"); }
    Writer& null() { return literal("null"); }

private:
    // Makes room for `n` more bytes, doubling the buffer (and moving the cursor with it).
    void room(std::size_t n) {
        if (static_cast<std::size_t>(end_ - p_) >= n + 1) return;
        flush();
        if (static_cast<std::size_t>(end_ - p_) >= n + 1) return;
        const std::size_t used = static_cast<std::size_t>(p_ - out_.data());
        out_.resize(std::max(out_.size() * 2, used + n + 1));
        p_ = out_.data() + used;
        end_ = out_.data() + out_.size();
    }
    void copy(std::string_view s) {
        std::memcpy(p_, s.data(), s.size());
        p_ += s.size();
    }
    Writer& literal(std::string_view text) {
        room(text.size() + 1);
        if (comma_) *p_++ = ',';
        copy(text);
        comma_ = true;
        return *this;
    }
    Writer& open(char c) {
        room(2);
        if (comma_) *p_++ = ',';
        *p_++ = c;
        comma_ = false;
        return *this;
    }
    Writer& close(char c) {
        room(1);
        *p_++ = c;
        comma_ = true;
        return *this;
    }
    // True when any of the 8 bytes in `x` is a control character, '"' or '\\' (the classic
    // "has a byte less than n" and "has a zero byte" word tricks; exact, not approximate).
    static bool needs_escape(std::uint64_t x) {
        constexpr std::uint64_t kOnes = 0x0101010101010101ULL, kHighs = 0x8080808080808080ULL;
        auto has_zero = [](std::uint64_t v) { return (v - kOnes) & ~v & kHighs; };
        return (((x - kOnes * 0x20) & ~x & kHighs) | has_zero(x ^ (kOnes * '"')) | has_zero(x ^ (kOnes * '\\'))) != 0;
    }

    void escaped(unsigned char c) {
        *p_++ = '\\';
        switch (c) {
            case '"': *p_++ = '"'; return;
            case '\\': *p_++ = '\\'; return;
            case '\n': *p_++ = 'n'; return;
            case '\r': *p_++ = 'r'; return;
            case '\t': *p_++ = 't'; return;
            default: {
                static constexpr char kHex[] = "0123456789abcdef";
                const char u[5] = {'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
                std::memcpy(p_, u, 5);
                p_ += 5;
            }
        }
    }

    // Needs room for 6 bytes per input byte plus the quotes (the \u00XX worst case). Text rarely
    // needs escaping, so it is checked and copied eight bytes at a time.
    void quoted(std::string_view s) {
        *p_++ = '"';
        const char* in = s.data();
        const char* const end = in + s.size();
        while (end - in >= 8) {
            std::uint64_t word;
            std::memcpy(&word, in, 8);
            if (!needs_escape(word)) {
                std::memcpy(p_, in, 8);
                p_ += 8;
                in += 8;
                continue;
            }
            for (const char* stop = in + 8; in != stop; ++in) {
                const auto c = static_cast<unsigned char>(*in);
                if (c >= 0x20 && c != '"' && c != '\\') *p_++ = *in;
                else escaped(c);
            }
        }
        for (; in != end; ++in) {
            const auto c = static_cast<unsigned char>(*in);
            if (c >= 0x20 && c != '"' && c != '\\') *p_++ = *in;
            else escaped(c);
        }
        *p_++ = '"';
    }

    std::string& out_;
    std::size_t base_;
    const JsonSink* sink_;
    std::size_t window_;
    char* p_ = nullptr;
    char* end_ = nullptr;
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
    explicit ResultWriter(std::string& out, const JsonSink* sink = nullptr, std::size_t window = 0) : w_(out, sink, window) {}

    void write(const FeasibilityResult& r) {
        w_.begin_object();
        w_.key("schema").string(kFeasibilityResultSchema);
        w_.key("campaign").string(r.campaign);
        equations();
        axes(r);
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
        missing(r.requirement_missing_evidence, 0);
        w_.key("candidates").begin_array();
        for (const auto& c : r.candidates) candidate(r, c);
        w_.end_array();
        w_.key("ledger").begin_object();
        for (const auto& ref : r.requirement_variables) ledger_entry(ref, 0);
        for (const auto& c : r.candidates)
            for (const auto& ref : r.used(c)) ledger_entry(ref, c.index);
        w_.end_object();
        w_.end_object();
        w_.flush();
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

    // What every candidate's axes are compared with, stated once.
    void axes(const FeasibilityResult& r) {
        static constexpr std::array<std::string_view, kAxisCount> kFigure{
            "runtime_context_limit_tokens >= T_req",
            "measured_max_stable_context_tokens >= T_req",
            "demand <= policy_available (physical-fail when demand > physical_available)",
            "deterministic_pass_rate >= min_deterministic_pass_rate",
            "relative_quality_loss <= max_relative_quality_loss",
            "warm_e2e_gain >= min_warm_e2e_gain",
            "tasks_per_hour_ratio >= min_tasks_per_hour_ratio",
        };
        w_.key("axes").begin_object();
        for (std::size_t i = 0; i < kAxisCount; ++i) {
            const auto name = static_cast<AxisName>(i);
            w_.key(to_string(name)).begin_object();
            w_.key("test").string(kFigure[i]);
            w_.key("comparison").string(comparison_name(comparison_of(name)));
            w_.key("unit").string(axis_unit(name));
            w_.key("behaviour").boolean(is_behaviour_axis(name));
            w_.key("required");
            bare_interval(r.required[i]);
            w_.end_object();
        }
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

    // Inside an axis, whose unit is stated once beside its two intervals.
    void bare_interval(const AnyInterval& any) {
        w_.begin_object();
        std::visit(
            [&](const auto& i) {
                w_.key("min");
                bound(i.min);
                w_.key("max");
                bound(i.max);
            },
            any);
        w_.end_object();
    }

    void pointer_value(const VariableRef& ref, std::size_t index) {
        scratch_.clear();
        append_pointer(scratch_, ref, index);
        w_.string(scratch_);
    }

    void missing(std::span<const VariableRef> refs, std::size_t index) {
        w_.begin_array();
        for (const auto& ref : refs) {
            w_.begin_object();
            w_.key("variable");
            pointer_value(ref, index);
            if (ref.absent) w_.key("absent").boolean(true);
            else w_.key("notes").string(ref.variable->notes);
            w_.end_object();
        }
        w_.end_array();
    }

    void candidate(const FeasibilityResult& r, const CandidateResult& c) {
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
            w_.key("actual");
            bare_interval(a.actual);
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
        for (const auto& u : r.load_bearing_unknowns(c)) {
            w_.begin_object();
            w_.key("axis").string(to_string(u.axis));
            w_.key("variable");
            pointer_value(u.variable, c.index);
            w_.key("reason").string(to_string(u.reason));
            w_.end_object();
        }
        w_.end_array();
        w_.key("missing_evidence");
        missing(r.missing_evidence(c), c.index);
        if (!c.arithmetic_error.empty()) w_.key("arithmetic_error").string(c.arithmetic_error);
        w_.end_object();
    }

    void ledger_entry(const VariableRef& ref, std::size_t index) {
        // The ledger records evidence the document holds; absent variables are listed as
        // missing evidence instead.
        if (ref.absent) return;
        scratch_.clear();
        append_pointer(scratch_, ref, index);
        w_.quoted_key(scratch_);
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
        w_.end_object();
    }

    Writer w_;
    std::string scratch_;
};

}  // namespace

void append_feasibility_json(std::string& out, const FeasibilityResult& result) { ResultWriter(out).write(result); }

void write_feasibility_json(const FeasibilityResult& result, const JsonSink& sink, std::size_t window_bytes) {
    std::string window;
    ResultWriter(window, &sink, std::max<std::size_t>(window_bytes, 4096)).write(result);
}

std::string feasibility_json(const FeasibilityResult& result) {
    std::string out;
    // About 3 KiB a candidate with its ledger; one reservation saves the doubling copies.
    out.reserve(4096 + result.candidates.size() * 3072);
    append_feasibility_json(out, result);
    return out;
}

}  // namespace anvil::registry
