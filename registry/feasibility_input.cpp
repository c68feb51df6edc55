#include "registry/feasibility_input.hpp"

#include <set>

namespace anvil::registry {

namespace {

NamedVariables read_named(const Node& parent, std::string_view key, JsonReader& reader, Presence p) {
    NamedVariables out;
    Node obj = reader.object(parent, key, p);
    if (!obj.present()) return out;
    for (const auto& [name, _] : obj.value->items()) {
        if (auto v = parse_evidence_variable(obj.child(name), reader)) out.emplace_back(name, std::move(*v));
    }
    return out;
}

std::optional<EvidenceVariable> read_variable(const Node& parent, std::string_view key, JsonReader& reader,
                                              Presence p) {
    Node n = parent.child(key);
    if (!n.present()) {
        if (p == Presence::required) reader.fail(n, "an evidence variable object");
        return std::nullopt;
    }
    return parse_evidence_variable(n, reader);
}

}  // namespace

std::optional<Requirements> parse_requirements(const Node& node, JsonReader& reader) {
    const std::size_t before = reader.error_count();
    Requirements r;
    r.tokens = read_named(node, "tokens", reader, Presence::required);
    if (auto v = read_variable(node, "concurrency", reader, Presence::required)) r.concurrency = *v;
    if (auto v = read_variable(node, "physical_vram_bytes", reader, Presence::required)) r.physical_vram_bytes = *v;
    Node reserves = reader.object(node, "vram_reserves", Presence::optional);
    if (reserves.present()) {
        for (const auto& [name, _] : reserves.value->items()) {
            Node item = reserves.child(name);
            VramReserve reserve{name, ReserveKind::policy, {}};
            auto kind = reader.string(item, "kind");
            if (kind && *kind == "physical") reserve.kind = ReserveKind::physical;
            else if (kind && *kind != "policy") reader.fail(item.child("kind"), "\"physical\" or \"policy\"");
            auto amount = read_variable(item, "variable", reader, Presence::required);
            if (amount) reserve.amount = *amount;
            r.vram_reserves.push_back(std::move(reserve));
        }
    }
    r.thresholds = read_named(node, "thresholds", reader, Presence::optional);
    if (reader.error_count() != before) return std::nullopt;
    return r;
}

std::optional<FeasibilityInput> parse_feasibility_input(const Node& root, JsonReader& reader) {
    const std::size_t before = reader.error_count();
    FeasibilityInput in;
    if (auto c = reader.string(root, "campaign")) in.campaign = *c;
    Node req = reader.object(root, "requirements");
    if (req.present()) {
        if (auto r = parse_requirements(req, reader)) in.requirements = std::move(*r);
    }
    in.tracked_variables = read_named(root, "tracked_variables", reader, Presence::optional);

    Node candidates = reader.array(root, "candidates");
    std::set<std::string> seen;
    for (std::size_t i = 0; candidates.present() && i < candidates.value->size(); ++i) {
        Node c = candidates.at(i);
        if (!c.value->is_object()) {
            reader.fail(c, "a candidate object");
            continue;
        }
        FeasibilityCandidate cand;
        if (auto id = reader.string(c, "id")) {
            cand.id = *id;
            if (!seen.insert(*id).second) reader.fail(c.child("id").pointer, "a candidate id not used before in this document", render_short(*id));
        }
        cand.runtime_context_limit_tokens = read_variable(c, "runtime_context_limit_tokens", reader, Presence::optional);
        cand.measured_max_stable_context_tokens =
            read_variable(c, "measured_max_stable_context_tokens", reader, Presence::optional);
        cand.resident_components = read_named(c, "resident_components", reader, Presence::optional);
        cand.per_sequence_components = read_named(c, "per_sequence_components", reader, Presence::optional);
        cand.per_token_components = read_named(c, "per_token_components", reader, Presence::optional);
        cand.kv_token_multiplier = read_variable(c, "kv_token_multiplier", reader, Presence::optional);
        cand.metrics = read_named(c, "metrics", reader, Presence::optional);
        cand.hard_failures = reader.string_array(c, "hard_failures", Presence::optional);
        in.candidates.push_back(std::move(cand));
    }
    if (reader.error_count() != before) return std::nullopt;
    return in;
}

}  // namespace anvil::registry
