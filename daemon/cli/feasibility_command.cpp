// anvil feasibility FILE [--format table|json]
#include <fstream>
#include <iostream>
#include <sstream>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"
#include "registry/document.hpp"
#include "registry/feasibility.hpp"
#include "registry/feasibility_json.hpp"

namespace anvil::cli {

namespace {

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot read");
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

std::string gib(const registry::IntInterval& bytes) {
    auto text = [](std::int64_t b) {
        std::ostringstream s;
        s.setf(std::ios::fixed);
        s.precision(1);
        s << static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0);
        return s.str();
    };
    if (!bytes.min && !bytes.max) return "?";
    if (bytes.min && bytes.max && *bytes.min == *bytes.max) return text(*bytes.min) + " GiB";
    return "[" + (bytes.min ? text(*bytes.min) : "?") + ", " + (bytes.max ? text(*bytes.max) : "?") + "] GiB";
}

bool still_open(registry::Verdict v) {
    return v == registry::Verdict::unresolved || v == registry::Verdict::benchmark_survivor || v == registry::Verdict::math_qualified;
}

void print_table(const registry::FeasibilityResult& r) {
    using registry::to_string;
    std::cout << "campaign " << r.campaign << ": T_req " << to_string(r.t_req) << " tokens, physical available "
              << to_string(r.physical_available) << " bytes (" << gib(r.physical_available) << "), policy available "
              << to_string(r.policy_available) << " bytes (" << gib(r.policy_available) << ")\n";
    for (const auto& e : r.errors) std::cout << "  error: " << e << "\n";
    for (const auto& c : r.candidates) {
        std::cout << "\n" << c.id << "  " << to_string(c.verdict) << "\n  axes:";
        for (const auto& a : c.axes) {
            std::cout << " " << to_string(a.name) << "=" << to_string(a.status);
            if (a.projected_status && *a.projected_status != registry::AxisStatus::unknown)
                std::cout << "(projected " << to_string(*a.projected_status) << ")";
        }
        std::cout << "\n  demand " << to_string(c.demand) << " bytes (" << gib(c.demand) << "), policy margin "
                  << to_string(c.policy_margin) << " bytes, T_max physical " << to_string(c.physical_t_max) << " / policy "
                  << to_string(c.policy_t_max) << " tokens\n";
        for (const auto& reason : c.reasons) std::cout << "  - " << reason << "\n";
        if (!still_open(c.verdict)) continue;
        // What to measure next only matters for a candidate still in the running.
        std::string absent;
        for (const auto& m : c.missing_evidence) {
            if (m.absent) absent += (absent.empty() ? "" : ", ") + registry::pointer(m, c.index);
            else std::cout << "  missing: " << registry::pointer(m, c.index) << ": " << m.variable->notes << "\n";
        }
        if (!absent.empty()) std::cout << "  absent from the document: " << absent << "\n";
    }
}

}  // namespace

int feasibility_command(const std::vector<std::string>& words) {
    Arguments args(words, {"--format"});
    if (args.positional().size() != 1) throw UsageError("expected one feasibility input file");
    const std::string format = args.value_or("--format", "table");
    if (format != "table" && format != "json") throw UsageError("--format must be table or json");
    const std::string path = args.positional()[0];

    const registry::Document doc = registry::parse_document(read_bytes(path), registry::Provenance{path, "", path, "", ""});
    if (!doc.valid()) {
        for (const auto& line : doc.error_lines()) std::cerr << line << "\n";
        return 1;
    }
    const auto* input = std::get_if<registry::FeasibilityInput>(&doc.body);
    if (!input) {
        std::cerr << path << ": a " << registry::to_string(doc.kind) << " document, not a feasibility input ("
                  << registry::kFeasibilityInputSchema << ")\n";
        return 1;
    }
    const registry::FeasibilityResult result = registry::evaluate_feasibility(*input);
    if (format == "json") std::cout << registry::json::parse(registry::feasibility_json(result)).dump(2) << "\n";
    else print_table(result);
    return 0;
}

}  // namespace anvil::cli
