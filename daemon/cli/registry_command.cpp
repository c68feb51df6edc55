// anvil registry check <path|url> [--ref R] [--format table|json] [--data-dir DIR] [--max-document-bytes N]
// Reads documents exactly as anvild's ingest does (parse_document, with the same limits), so it
// reports the same errors.
#include <iostream>

#include <fmt/ranges.h>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"
#include "registry/catalog.hpp"
#include "registry/catalog_report.hpp"

namespace anvil::cli {

namespace {

void print_table(const registry::Catalog& catalog, const std::string& location) {
    for (const auto& [path, doc] : catalog.documents()) {
        const auto problems = catalog.problems(doc);
        std::string id = doc.id.empty() ? path : doc.id;
        std::string line = id + "  " + std::string(registry::to_string(doc.kind)) + "  ";
        if (!problems.empty()) line += fmt::format("INVALID: {}", fmt::join(problems, " | "));
        else if (!doc.pins_apply()) line += "(pinning n/a)";
        else if (doc.pins.pinned()) line += "pinned";
        else line += fmt::format("unpinned: {}", fmt::join(doc.pins.unpinned_reasons, "; "));
        if (problems.empty() && doc.is_external_prior()) line += "  (external prior: never promotes)";
        if (problems.empty() && !doc.warnings.empty()) line += fmt::format("  warnings: {}", fmt::join(doc.warnings, "; "));
        std::cout << line << "\n";
    }
    const auto s = registry::summarize(catalog);
    std::cout << s.documents << " documents in " << location << (catalog.commit().empty() ? "" : " at " + catalog.commit().substr(0, 12))
              << ": " << s.valid << " valid (" << s.pinned << " pinned, " << s.unpinned << " unpinned), " << s.invalid
              << " invalid\n";
}

registry::DocumentLimits document_limits(const Arguments& args) {
    registry::DocumentLimits limits;
    limits.max_document_bytes = args.positive_or("--max-document-bytes", limits.max_document_bytes);
    return limits;
}

int check(const std::vector<std::string>& words) {
    Arguments args(words, {"--ref", "--format", "--data-dir", "--max-document-bytes"});
    if (args.positional().size() != 1) throw UsageError("expected one registry path or URL");
    const std::string location = args.positional()[0];
    const std::string format = args.value_or("--format", "table");
    if (format != "table" && format != "json") throw UsageError("--format must be table or json");
    const std::string ref = args.value_or("--ref", "");
    const auto limits = document_limits(args);

    registry::Catalog catalog(limits);
    if (registry::is_git_location(location)) {
        registry::GitSource source(location, ref, args.value_or("--data-dir", default_data_dir()));
        catalog.sync(source);
    } else {
        if (!ref.empty()) throw UsageError(location + " is not a git repository, so --ref does not apply");
        catalog = registry::Catalog::from_filesystem(location, {}, limits);
    }
    // The report is UTF-8 already; replacing what is not is the last guard against a throwing dump().
    if (format == "json")
        std::cout << registry::catalog_report(catalog, location, ref).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else print_table(catalog, location);
    return registry::summarize(catalog).invalid > 0 ? 1 : 0;
}

}  // namespace

int registry_command(const std::vector<std::string>& args) {
    if (args.empty() || args[0] != "check") throw UsageError("expected `anvil registry check <path|url>`");
    return check(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace anvil::cli
