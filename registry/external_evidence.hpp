// Documents that are evidence of class `external-prior`: the external-priors record (seed 000) and
// runtime publications (seed 001). They choose what to test locally; they never promote anything.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "registry/json_reader.hpp"
#include "registry/pinning.hpp"

namespace anvil::registry {

inline constexpr std::string_view kExternalPriorsSchema = "anvil-serving.external-priors/v1";

struct PriorModel {
    std::string model;
    std::string revision;
    std::optional<std::int64_t> logical_payload_bytes;
    std::optional<std::string> license;
};

struct ExternalPriors {
    std::string observed_at;
    PriorModel candidate;
    std::optional<PriorModel> draft;
    std::string runtime_source_url;
    std::string runtime_source_revision;
    std::string runtime_image;
    std::optional<std::int64_t> published_context_tokens;
    std::optional<std::int64_t> published_max_sequences;
    std::map<std::string, double> reported_results;  // numbers as published; never local evidence
    std::string decision_use;
};

// A runtime publication: one engine build published by a third party, with its image pins, the
// source commits it was built from, and the results it reports.
struct RuntimePublication {
    std::string schema;
    std::string created_at;
    std::string model;
    std::string hardware;
    std::string image_tag;          // image.versioned
    std::optional<std::string> image_index_digest;  // image.oci_index
    std::map<std::string, std::string> source_commits;  // source.*_commit
    std::map<std::string, std::int64_t> profile_max_model_len;
    std::optional<double> kld_mean;

    // The reference that pins what was published: "<repository>@<oci index digest>".
    std::optional<std::string> pinned_image() const;
};

// True for the schema names runtime publications use, e.g. glm53-exl3-sm120-runtime-publication.v1.
bool is_runtime_publication_schema(std::string_view schema);

std::optional<ExternalPriors> parse_external_priors(const Node& root, JsonReader& reader, PinStatus& pins);
std::optional<RuntimePublication> parse_runtime_publication(const Node& root, JsonReader& reader, PinStatus& pins);

}  // namespace anvil::registry
