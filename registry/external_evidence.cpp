#include "registry/external_evidence.hpp"

#include <algorithm>

namespace anvil::registry {

namespace {

void require_commit(const Node& parent, std::string_view key, JsonReader& reader, std::string& out) {
    if (auto s = reader.string(parent, key)) {
        out = *s;
        if (!is_commit_id(*s)) reader.fail(parent.child(key), "a 40-hex commit id");
    }
}

std::optional<PriorModel> read_prior_model(const Node& parent, std::string_view key, JsonReader& reader, Presence p) {
    Node m = reader.object(parent, key, p);
    if (!m.present()) return std::nullopt;
    PriorModel out;
    if (auto s = reader.string(m, "model")) out.model = *s;
    require_commit(m, "revision", reader, out.revision);
    out.logical_payload_bytes = reader.integer(m, "logical_payload_bytes", Presence::optional, 0);
    out.license = reader.string(m, "license", Presence::optional);
    return out;
}

}  // namespace

bool is_runtime_publication_schema(std::string_view schema) {
    // <name>-runtime-publication.v<N>, name in [a-z0-9.-] starting with a letter or digit.
    constexpr std::string_view kMarker = "-runtime-publication.v";
    const auto at = schema.rfind(kMarker);
    if (at == std::string_view::npos || at == 0) return false;
    const auto name = schema.substr(0, at), version = schema.substr(at + kMarker.size());
    auto name_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'; };
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    return name_char(name[0]) && name[0] != '.' && name[0] != '-' && std::all_of(name.begin(), name.end(), name_char) &&
           !version.empty() && std::all_of(version.begin(), version.end(), digit);
}

std::optional<ExternalPriors> parse_external_priors(const Node& root, JsonReader& reader, PinStatus& pins) {
    const std::size_t before = reader.error_count();
    ExternalPriors p;
    if (auto s = reader.string(root, "observed_at")) p.observed_at = *s;
    if (auto c = read_prior_model(root, "candidate", reader, Presence::required)) p.candidate = *c;
    p.draft = read_prior_model(root, "draft", reader, Presence::optional);
    Node runtime = reader.object(root, "runtime");
    if (runtime.present()) {
        if (auto s = reader.string(runtime, "source_url")) p.runtime_source_url = *s;
        require_commit(runtime, "source_revision", reader, p.runtime_source_revision);
        if (auto s = reader.string(runtime, "image")) p.runtime_image = *s;
    }
    Node recipe = reader.object(root, "published_recipe", Presence::optional);
    if (recipe.present()) {
        p.published_context_tokens = reader.integer(recipe, "context_tokens", Presence::optional, 1);
        p.published_max_sequences = reader.integer(recipe, "max_sequences", Presence::optional, 1);
        Node results = reader.object(recipe, "reported_results", Presence::optional);
        if (results.present()) {
            for (const auto& [name, value] : results.value->items()) {
                if (value.is_number()) p.reported_results[name] = value.get<double>();
                else reader.fail(results.child(name), "a number");
            }
        }
    }
    // The class is what keeps priors from promoting anything: it must say so explicitly.
    if (auto cls = reader.string(root, "evidence_class")) {
        if (*cls != "external-prior") reader.fail(root.child("evidence_class"), "\"external-prior\"");
    }
    if (auto s = reader.string(root, "decision_use", Presence::optional)) p.decision_use = *s;
    if (reader.error_count() != before) return std::nullopt;
    if (!is_pinned_image(p.runtime_image))
        pins.unpinned_reasons.push_back("runtime image '" + p.runtime_image + "' is not pinned by digest");
    return p;
}

std::optional<std::string> RuntimePublication::pinned_image() const {
    if (!image_index_digest) return std::nullopt;
    auto colon = image_tag.rfind(':');
    auto slash = image_tag.rfind('/');
    std::string repository = (colon != std::string::npos && (slash == std::string::npos || colon > slash))
                                 ? image_tag.substr(0, colon)
                                 : image_tag;
    return repository + "@" + *image_index_digest;
}

std::optional<RuntimePublication> parse_runtime_publication(const Node& root, JsonReader& reader, PinStatus& pins) {
    const std::size_t before = reader.error_count();
    RuntimePublication pub;
    if (auto s = reader.string(root, "schema")) pub.schema = *s;
    if (auto s = reader.string(root, "created_at")) pub.created_at = *s;
    if (auto s = reader.string(root, "model")) pub.model = *s;
    if (auto s = reader.string(root, "hardware", Presence::optional)) pub.hardware = *s;
    Node image = reader.object(root, "image");
    if (image.present()) {
        if (auto s = reader.string(image, "versioned")) pub.image_tag = *s;
        pub.image_index_digest = reader.string(image, "oci_index", Presence::optional);
        for (const char* key : {"oci_index", "amd64_manifest", "attestation_manifest"}) {
            Node d = image.child(key);
            if (d.present() && !(d.value->is_string() && is_sha256_digest(d.value->get<std::string>())))
                reader.fail(d, "\"sha256:<64 lowercase hex>\"");
        }
    }
    Node source = reader.object(root, "source", Presence::optional);
    if (source.present()) {
        for (const auto& [key, value] : source.value->items()) {
            if (!key.ends_with("_commit")) continue;
            if (!value.is_string() || !is_commit_id(value.get<std::string>())) {
                reader.fail(source.child(key), "a 40-hex commit id");
                continue;
            }
            pub.source_commits[key] = value.get<std::string>();
        }
    }
    Node profiles = reader.object(root, "profiles", Presence::optional);
    if (profiles.present()) {
        for (const auto& [name, _] : profiles.value->items()) {
            Node prof = profiles.child(name);
            if (auto n = reader.integer(prof, "max_model_len", Presence::optional, 1)) pub.profile_max_model_len[name] = *n;
        }
    }
    Node kld = reader.object(root, "kld", Presence::optional);
    if (kld.present()) pub.kld_mean = reader.number(kld, "mean", Presence::optional);
    if (reader.error_count() != before) return std::nullopt;

    if (!pub.image_index_digest)
        pins.unpinned_reasons.push_back("image '" + pub.image_tag + "' has no OCI index digest");
    if (pub.source_commits.empty())
        pins.unpinned_reasons.push_back("no runtime source commit is recorded");
    return pub;
}

}  // namespace anvil::registry
