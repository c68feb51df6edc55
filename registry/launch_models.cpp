#include "registry/launch_models.hpp"

#include <array>
#include <set>

namespace anvil::registry {

namespace {

// The shape of one model block. The same reader serves launch.model and launch.draft.model, so a
// draft model is described, pinned and licensed exactly as the served one is.
ModelRef read_model_block(const Node& m, JsonReader& reader, bool dtype_required) {
    ModelRef ref;
    if (auto s = reader.string(m, "path")) ref.path = *s;
    ref.digest = reader.string(m, "digest", Presence::optional);
    if (ref.digest && !is_sha256_digest(*ref.digest))
        reader.fail(m.child("digest"), "null or \"sha256:<64 lowercase hex>\" (see `anvil model digest DIR`)");
    ref.repository = reader.string(m, "repository", Presence::optional);
    ref.revision = reader.string(m, "revision", Presence::optional);
    ref.licence = reader.string(m, "licence", Presence::optional);
    if (auto s = reader.string(m, "dtype", dtype_required ? Presence::required : Presence::optional)) ref.dtype = *s;
    return ref;
}

struct DraftShape {
    DraftKind kind;
    const char* name;
    const char* article;         // "a self draft", "an ngram draft"
    std::set<std::string> keys;  // every key this kind takes, "kind" and "tokens" included
    const char* keys_text;       // the same, for people
};

const std::array<DraftShape, 4> kDraftShapes{{
    {DraftKind::self, "self", "a", {"kind", "weights", "tokens"}, "kind, weights and tokens"},
    {DraftKind::model, "model", "a", {"kind", "model", "weights", "tokens"}, "kind, model, weights and tokens"},
    {DraftKind::layers, "layers", "a", {"kind", "layers", "tokens"}, "kind, layers and tokens"},
    {DraftKind::ngram, "ngram", "an", {"kind", "ngram", "tokens"}, "kind, ngram and tokens"},
}};

constexpr std::int64_t kMaxDraftTokens = 16;  // anvil-engine's --draft-tokens range is 1..16
constexpr std::int64_t kMaxDraftNgram = 64;   // and its --draft-ngram range 1..64

// A whole number in [min, max] at `n`, or a failure saying `expected`. Absent or null: nothing,
// and a failure only when `required`.
std::optional<std::int64_t> bounded_integer(const Node& n, JsonReader& reader, std::int64_t min, std::int64_t max,
                                            const std::string& expected, bool required) {
    if (n.is_null()) {
        if (required) reader.fail(n, expected);
        return std::nullopt;
    }
    const json& v = *n.value;
    std::optional<std::int64_t> out;
    if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)) out = static_cast<std::int64_t>(v.get<std::uint64_t>());
    else if (v.is_number_integer() && !v.is_number_unsigned()) out = v.get<std::int64_t>();
    if (!out || *out < min || *out > max) {
        reader.fail(n, expected);
        return std::nullopt;
    }
    return out;
}

// A string among `allowed` at `n`, or a failure saying `expected`.
std::optional<std::string> one_of(const Node& n, JsonReader& reader, const std::set<std::string>& allowed,
                                  const std::string& expected, bool required) {
    if (n.is_null()) {
        if (required) reader.fail(n, expected);
        return std::nullopt;
    }
    if (!n.value->is_string() || !allowed.count(n.value->get<std::string>())) {
        reader.fail(n, expected);
        return std::nullopt;
    }
    return n.value->get<std::string>();
}

}  // namespace

std::string_view to_string(DraftKind kind) {
    for (const auto& shape : kDraftShapes)
        if (shape.kind == kind) return shape.name;
    return "?";
}

void read_launch_model(const Node& launch, JsonReader& reader, Launch& l, bool required) {
    Node m = reader.object(launch, "model", required ? Presence::required : Presence::optional);
    if (!m.present()) return;
    l.model = read_model_block(m, reader, required);
}

void read_launch_draft(const Node& launch, JsonReader& reader, Launch& l) {
    // Draft flags of the recipe's own (--draft-model /elsewhere) would bypass the paper judgement of
    // the draft: registry/owned_flags refuses them with the other flags the driver owns.
    const Node d = launch.child("draft");
    if (d.is_null()) return;
    if (l.kind != "embedded") {
        reader.fail(d,
                    "no draft on a " + (l.kind.empty() ? std::string("launch of no kind") : "'" + l.kind + "' launch") +
                        ": launch.draft is for the embedded engine (launch.kind \"embedded\"); vLLM and SGLang recipes give "
                        "their speculative flags in launch.arguments");
        return;
    }
    if (!d.value->is_object()) {
        reader.fail(d, "a draft object {\"kind\": \"self\" | \"model\" | \"layers\" | \"ngram\", …, \"tokens\": 1..16}");
        return;
    }
    const std::size_t before = reader.error_count();
    const DraftShape* shape = nullptr;
    if (auto kind = reader.string(d, "kind")) {
        for (const auto& s : kDraftShapes)
            if (*kind == s.name) shape = &s;
        if (!shape) reader.fail(d.child("kind"), "one of \"self\", \"model\", \"layers\", \"ngram\"");
    }
    if (!shape) return;
    for (const auto& [key, value] : d.value->items())
        if (!shape->keys.count(key))
            reader.fail(d.child(key), "no \"" + key + "\" in " + shape->article + " " + shape->name + " draft (it takes " + shape->keys_text + ")",
                        render_short(value));

    Draft draft;
    draft.kind = shape->kind;
    if (auto k = bounded_integer(d.child("tokens"), reader, 1, kMaxDraftTokens, "a whole number of draft tokens from 1 to 16 (default 4)", false))
        draft.tokens = *k;
    switch (shape->kind) {
        case DraftKind::self:
            draft.weights = one_of(d.child("weights"), reader, {"q8", "bf16"},
                                   "\"q8\" or \"bf16\": the format the target's own weights are converted to as the draft", true);
            break;
        case DraftKind::model: {
            const Node m = reader.object(d, "model");
            if (m.present()) draft.model = read_model_block(m, reader, true);
            draft.weights = one_of(d.child("weights"), reader, {"f32", "bf16", "q8"},
                                   "\"f32\", \"bf16\" or \"q8\" (or no weights: the draft model as stored)", false);
            break;
        }
        case DraftKind::layers:
            draft.layers = bounded_integer(d.child("layers"), reader, 1, INT32_MAX,
                                           "a positive whole number of the target's layers to draft with", true);
            break;
        case DraftKind::ngram:
            draft.ngram = bounded_integer(d.child("ngram"), reader, 1, kMaxDraftNgram,
                                          "a whole number of tokens from 1 to 64 for prompt lookup to match", true);
            break;
    }
    if (reader.error_count() == before) l.draft = std::move(draft);
}

void pin_launch_models(const Launch& l, std::vector<std::string>& reasons) {
    const bool embedded = l.kind == "embedded";
    auto pin = [&](const ModelRef& m, const std::string& role) {
        if (embedded && !m.digest)
            reasons.push_back(role + " directory " + m.path + " has no content digest (compute it with `anvil model digest DIR`)");
        if (m.revision && !is_commit_id(*m.revision)) reasons.push_back(role + " revision '" + *m.revision + "' is not a 40-hex commit");
    };
    if (l.model) pin(*l.model, "model");
    if (l.draft && l.draft->model) pin(*l.draft->model, "draft model");
}

}  // namespace anvil::registry
