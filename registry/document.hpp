// One registry document: its kind, typed body, provenance, pinning and errors. parse_document is
// the single entry point from bytes to a Document; it never throws on bad input.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "registry/external_evidence.hpp"
#include "registry/feasibility_input.hpp"
#include "registry/field_error.hpp"
#include "registry/pinning.hpp"
#include "registry/recipe.hpp"

namespace anvil::registry {

enum class DocumentKind {
    invalid,  // could not even tell what it is
    recipe,
    external_priors,
    runtime_publication,
    feasibility_input,
    hardware,
    model,
    model_instance,
    speed_sweep,
};
std::string_view to_string(DocumentKind kind);

// Where a document's bytes came from: enough to fetch exactly these bytes again.
struct Provenance {
    std::string source_url;  // the registry source as configured (path or URL)
    std::string commit;      // the commit these bytes were read at (unchanged since, until a newer
                             // revision replaces them); empty for a plain directory or a file
    std::string path;        // path inside the source
    std::string blob_id;     // git blob id; empty outside git
    std::string sha256;      // of the bytes as read
};

// The catalogue records of local-ai-registry/v1 that are not recipes: hardware, models, model
// instances and speed sweeps. Their fields are kept in `Document::raw`; these are the ones anvil reads.
struct RegistryRecord {
    std::string id;
    std::string name;
    std::optional<std::string> repository;      // model instance: hub repository
    std::optional<std::string> revision;        // model instance: hub revision
    std::optional<std::string> recipe_id;       // speed sweep
    std::optional<double> vram_gb;              // hardware
};

using DocumentBody = std::variant<std::monostate, Recipe, ExternalPriors, RuntimePublication, FeasibilityInput, RegistryRecord>;

struct Document {
    DocumentKind kind = DocumentKind::invalid;
    std::string id;      // unique per kind within a registry snapshot
    std::string schema;  // schema or schema_version as written
    Provenance provenance;
    json raw;            // the whole record as read (unwrapped); unknown fields live here
    std::optional<json> envelope_meta;  // set when the file was {"data": …, "meta": …}
    DocumentBody body;
    PinStatus pins;
    std::vector<std::string> warnings;
    FieldErrors errors;

    bool valid() const { return errors.empty(); }
    // Evidence from third parties: may choose what to test, never promote anything.
    bool is_external_prior() const { return kind == DocumentKind::external_priors || kind == DocumentKind::runtime_publication; }
    // Pinning rules apply to what names an artifact to run: recipes, priors, publications, model instances.
    bool pins_apply() const {
        return kind == DocumentKind::recipe || is_external_prior() || kind == DocumentKind::model_instance;
    }
    const Recipe* recipe() const { return std::get_if<Recipe>(&body); }
    // The file as it was: the record, re-wrapped in its envelope if it had one.
    json to_json() const;
    // "FILE: at /pointer: expected …" for each error.
    std::vector<std::string> error_lines() const;
};

// What a document may hold, checked before its bytes are parsed (size, nesting, UTF-8) or after
// (the id): a registry author must not be able to make the daemon store, log or index unbounded text.
inline constexpr std::size_t kDefaultMaxDocumentBytes = 1 << 20;  // 1 MiB; real recipes are a few KiB
inline constexpr std::size_t kMaxIdLength = 128;                   // characters
struct DocumentLimits {
    std::size_t max_document_bytes = kDefaultMaxDocumentBytes;  // anvild's max_document_bytes
};

// Reads one document. `path` (inside the source) also hints at the kind of a local-ai-registry
// record (recipe/, hardware/, model/, model-instance/, speed-sweeps/).
Document parse_document(std::string_view bytes, Provenance provenance, const DocumentLimits& limits = {});

// A document of `size` bytes over the limit, judged without its bytes: the error parse_document
// gives, for a source that knows the size before reading (a git blob's header).
bool over_document_limit(std::uint64_t size, const DocumentLimits& limits);
Document oversized_document(std::uint64_t size, Provenance provenance, const DocumentLimits& limits);

// True for files a registry holds documents in: *.json, excluding JSON Schemas (*.schema.json).
bool is_document_path(std::string_view path);

}  // namespace anvil::registry
