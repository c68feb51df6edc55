#include "registry/document.hpp"

#include <algorithm>

#include "registry/json_text_check.hpp"
#include "support/digest.hpp"
#include "support/utf8.hpp"

namespace anvil::registry {

namespace {

// local-ai-registry/v1 keeps one directory per record kind; shape decides where the path does not.
DocumentKind registry_record_kind(const json& record, std::string_view path) {
    auto in_dir = [&](std::string_view dir) {
        std::string needle = "/" + std::string(dir) + "/";
        std::string p = "/" + std::string(path);
        return p.find(needle) != std::string::npos;
    };
    if (record.contains("launch") || in_dir("recipe") || in_dir("recipes")) return DocumentKind::recipe;
    if (in_dir("model-instance") || in_dir("model-instances") || record.contains("model_id")) return DocumentKind::model_instance;
    if (in_dir("speed-sweeps") || in_dir("speed-sweep") || record.contains("recipe_id")) return DocumentKind::speed_sweep;
    if (in_dir("hardware") || record.contains("memory")) return DocumentKind::hardware;
    if (in_dir("model") || in_dir("models") || record.contains("architecture")) return DocumentKind::model;
    return DocumentKind::invalid;
}

void parse_registry_record(Document& doc, const Node& root, JsonReader& reader) {
    RegistryRecord rec;
    if (auto s = reader.string(root, "id")) rec.id = *s;
    switch (doc.kind) {
        case DocumentKind::hardware: {
            if (auto s = reader.string(root, "name")) rec.name = *s;
            Node memory = reader.object(root, "memory");
            if (memory.present()) rec.vram_gb = reader.number(memory, "vram_gb", Presence::optional);
            break;
        }
        case DocumentKind::model:
            if (auto s = reader.string(root, "name")) rec.name = *s;
            break;
        case DocumentKind::model_instance:
            reader.string(root, "model_id");
            rec.repository = reader.string(root, "repository", Presence::optional);
            rec.revision = reader.string(root, "revision", Presence::optional);
            if (rec.revision && !is_commit_id(*rec.revision))
                doc.pins.unpinned_reasons.push_back("revision '" + *rec.revision + "' is not a 40-hex commit");
            if (!rec.revision) doc.pins.unpinned_reasons.push_back("no hub revision recorded");
            break;
        case DocumentKind::speed_sweep:
            rec.recipe_id = reader.string(root, "recipe_id");
            reader.array(root, "rows");
            break;
        default:
            break;
    }
    doc.id = rec.id;
    doc.body = std::move(rec);
}

void parse_body(Document& doc, const Node& root, JsonReader& reader) {
    const json& record = *root.value;
    auto schema_version = record.find("schema_version");
    auto schema = record.find("schema");
    if (schema_version != record.end() && schema_version->is_string()) {
        doc.schema = schema_version->get<std::string>();
        if (doc.schema == kAnvilRecipeSchema) {
            doc.kind = DocumentKind::recipe;
        } else if (doc.schema == kLocalAiRegistrySchema) {
            doc.kind = registry_record_kind(record, doc.provenance.path);
            if (doc.kind == DocumentKind::invalid) {
                reader.fail(root, "a local-ai-registry/v1 recipe, hardware, model, model-instance or speed-sweep record");
                return;
            }
        } else {
            reader.fail(root.child("schema_version"),
                        std::string("a known schema_version (") + std::string(kLocalAiRegistrySchema) + " or " +
                            std::string(kAnvilRecipeSchema) + ")");
            return;
        }
    } else if (schema != record.end() && schema->is_string()) {
        doc.schema = schema->get<std::string>();
        if (doc.schema == kExternalPriorsSchema) doc.kind = DocumentKind::external_priors;
        else if (doc.schema == kFeasibilityInputSchema) doc.kind = DocumentKind::feasibility_input;
        else if (is_runtime_publication_schema(doc.schema)) doc.kind = DocumentKind::runtime_publication;
        else {
            reader.fail(root.child("schema"),
                        "a known schema (" + std::string(kExternalPriorsSchema) + ", " + std::string(kFeasibilityInputSchema) +
                            " or <name>-runtime-publication.v1)");
            return;
        }
    } else {
        reader.fail(schema_version != record.end() ? root.child("schema_version") : schema != record.end() ? root.child("schema") : root.child("schema_version"),
                    "a string `schema_version` (registry records) or `schema` (anvil-serving documents)");
        return;
    }

    switch (doc.kind) {
        case DocumentKind::recipe: {
            RecipeCheck check;
            if (auto r = parse_recipe(root, reader, check)) {
                doc.id = r->id;
                doc.body = std::move(*r);
            } else if (record.contains("id") && record["id"].is_string()) {
                doc.id = record["id"].get<std::string>();
            }
            doc.warnings = std::move(check.warnings);
            doc.pins = std::move(check.pins);
            break;
        }
        case DocumentKind::external_priors:
            if (auto p = parse_external_priors(root, reader, doc.pins)) {
                doc.id = "priors:" + p->candidate.model + "@" + p->candidate.revision.substr(0, 12);
                doc.body = std::move(*p);
            }
            break;
        case DocumentKind::runtime_publication:
            if (auto p = parse_runtime_publication(root, reader, doc.pins)) {
                doc.id = "publication:" + p->model + "@" + p->created_at;
                doc.body = std::move(*p);
            }
            break;
        case DocumentKind::feasibility_input:
            if (auto f = parse_feasibility_input(root, reader)) {
                doc.id = "feasibility:" + f->campaign;
                doc.body = std::move(*f);
            }
            break;
        default:
            parse_registry_record(doc, root, reader);
            break;
    }
}

}  // namespace

std::string_view to_string(DocumentKind kind) {
    switch (kind) {
        case DocumentKind::invalid: return "invalid";
        case DocumentKind::recipe: return "recipe";
        case DocumentKind::external_priors: return "external-priors";
        case DocumentKind::runtime_publication: return "runtime-publication";
        case DocumentKind::feasibility_input: return "feasibility-input";
        case DocumentKind::hardware: return "hardware";
        case DocumentKind::model: return "model";
        case DocumentKind::model_instance: return "model-instance";
        case DocumentKind::speed_sweep: return "speed-sweep";
    }
    return "invalid";
}

bool is_document_path(std::string_view path) {
    return path.ends_with(".json") && !path.ends_with(".schema.json");
}

json Document::to_json() const {
    if (!envelope_meta) return raw;
    return json{{"data", raw}, {"meta", *envelope_meta}};
}

std::vector<std::string> Document::error_lines() const {
    std::vector<std::string> out;
    out.reserve(errors.size());
    for (const auto& e : errors) out.push_back(format_error(provenance.path, e));
    return out;
}

namespace {

std::size_t utf8_length(std::string_view text) {
    return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

FieldError size_error(std::uint64_t size, const DocumentLimits& limits) {
    return {"", "a document of at most " + std::to_string(limits.max_document_bytes) + " bytes (max_document_bytes in anvild's configuration)",
            std::to_string(size) + " bytes"};
}

// What must hold before the bytes are parsed at all: a file name that can be reported, a bounded
// size, bounded nesting and UTF-8 throughout. False after recording the first that does not.
bool readable_as_json(Document& doc, std::string_view bytes, const DocumentLimits& limits) {
    if (!support::is_valid_utf8(doc.provenance.path)) {
        doc.provenance.path = support::to_valid_utf8(doc.provenance.path);
        doc.errors.push_back({"", "a file name of valid UTF-8 (rename the file)", "\"" + doc.provenance.path + "\""});
        return false;
    }
    if (over_document_limit(bytes.size(), limits)) {
        doc.errors.push_back(size_error(bytes.size(), limits));
        return false;
    }
    if (auto problem = check_json_text(bytes)) {
        doc.errors.push_back(std::move(*problem));
        return false;
    }
    return true;
}

// Ids name revisions in the ledger, logs and URLs: a long one is refused, and not kept as the id.
void check_id_length(Document& doc, const std::string& root_pointer) {
    const std::size_t length = utf8_length(doc.id);
    if (length <= kMaxIdLength) return;
    const bool written = doc.raw.is_object() && doc.raw.contains("id");
    doc.errors.push_back({root_pointer + (written ? "/id" : ""),
                          written ? "an id of at most " + std::to_string(kMaxIdLength) + " characters"
                                  : "fields that make an id (" + std::string(to_string(doc.kind)) + ") of at most " +
                                        std::to_string(kMaxIdLength) + " characters",
                          "an id of " + std::to_string(length) + " characters"});
    doc.id.clear();
}

}  // namespace

bool over_document_limit(std::uint64_t size, const DocumentLimits& limits) { return size > limits.max_document_bytes; }

Document oversized_document(std::uint64_t size, Provenance provenance, const DocumentLimits& limits) {
    Document doc;
    doc.provenance = std::move(provenance);
    if (!support::is_valid_utf8(doc.provenance.path)) doc.provenance.path = support::to_valid_utf8(doc.provenance.path);
    doc.errors.push_back(size_error(size, limits));
    return doc;
}

Document parse_document(std::string_view bytes, Provenance provenance, const DocumentLimits& limits) {
    Document doc;
    if (provenance.sha256.empty()) provenance.sha256 = support::sha256_hex(bytes);
    doc.provenance = std::move(provenance);
    if (!readable_as_json(doc, bytes, limits)) return doc;
    try {
        doc.raw = json::parse(bytes.begin(), bytes.end());
    } catch (const json::parse_error& e) {
        // The message quotes the last bytes read, which may end inside a multi-byte character.
        std::string what = support::to_valid_utf8(e.what());
        if (auto colon = what.rfind(": "); colon != std::string::npos) what = what.substr(colon + 2);
        doc.errors.push_back({"", "a JSON document", "invalid JSON at " + position_of(bytes, e.byte) + " (" + what + ")"});
        return doc;
    } catch (const json::out_of_range& e) {
        // A number beyond double's range (1e400) is well-formed JSON that no reader can hold; the
        // exception carries no byte offset, so the number it quotes is looked up to say where.
        std::string what = e.what();
        if (auto bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
        std::string where;
        if (auto open = what.find('\''), close = what.rfind('\''); open != std::string::npos && close > open + 1)
            if (auto at = bytes.find(what.substr(open + 1, close - open - 1)); at != std::string_view::npos)
                where = " at " + position_of(bytes, at);
        doc.errors.push_back({"", "a JSON document whose numbers fit a double", "invalid JSON" + where + " (" + what + ")"});
        return doc;
    }
    if (!doc.raw.is_object()) {
        doc.errors.push_back({"", "a JSON object", render_short(doc.raw)});
        doc.raw = json();
        return doc;
    }
    std::string root_pointer;
    // {"data": record, "meta": {...}} is how the registry's API serves a record.
    if (doc.raw.contains("data") && doc.raw["data"].is_object() && !doc.raw.contains("schema_version") && !doc.raw.contains("schema")) {
        if (doc.raw.contains("meta")) doc.envelope_meta = doc.raw["meta"];
        else doc.envelope_meta = json::object();
        json record = std::move(doc.raw["data"]);
        doc.raw = std::move(record);
        root_pointer = "/data";
    }
    JsonReader reader(doc.errors);
    parse_body(doc, Node{&doc.raw, root_pointer}, reader);
    check_id_length(doc, root_pointer);
    return doc;
}

}  // namespace anvil::registry
