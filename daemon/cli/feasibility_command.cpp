// anvil feasibility FILE... [--format table|json] [--pretty] [--inventory FILE|measure] [--commercial yes|no]
//                  [--model-root DIR] [--max-document-bytes N]
//
// Feasibility inputs go through the calculator; recipes through the gates, using the first
// feasibility input's requirements, the licences the given external priors record, and the
// hardware records given for their memory. Embedded recipes' host memory is judged against this
// host's MemTotal, with each model's config.json read from its path (${MODEL_ROOT} is --model-root).
// With one feasibility input and nothing else, the JSON is exactly the recipe-feasibility-result/v1
// document.
//
// The JSON is compact unless --pretty is given. Either way it streams from the calculator's writer
// (registry::write_feasibility_json) through one reused window, never parsed back: --pretty
// re-indents the pieces as they pass (registry::JsonIndenter). A campaign of 10,000 candidates is
// ~13.6 MB in and ~34 MB out; see docs/FEASIBILITY.md's Speed section.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"
#include "daemon/host/host_inventory.hpp"
#include "registry/document.hpp"
#include "registry/feasibility.hpp"
#include "registry/feasibility_json.hpp"
#include "registry/host_memory.hpp"
#include "registry/inventory.hpp"
#include "registry/json_pretty.hpp"
#include "registry/recipe_gates.hpp"

namespace anvil::cli {

namespace {

namespace reg = registry;

// The files named here are the user's own, not a registry author's: a campaign of 10,000 candidates
// is ~13 MB, far over the 1 MiB a registry document may hold in anvild.
constexpr std::size_t kDefaultMaxDocumentBytes = std::size_t{256} << 20;

reg::DocumentLimits document_limits(const Arguments& args) {
    return reg::DocumentLimits{args.positive_or("--max-document-bytes", kDefaultMaxDocumentBytes)};
}

// The whole file in a few read() calls, sized by fstat when it is a regular file (a pipe, such as
// <(command), is read until its end).
std::string read_bytes(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    struct stat st {};
    std::string bytes;
    // One byte more than the size, so that the end is seen without growing the string.
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) bytes.resize(static_cast<std::size_t>(st.st_size) + 1);
    std::size_t done = 0;
    for (;;) {
        if (done == bytes.size()) bytes.resize(std::max<std::size_t>(bytes.size() * 2, std::size_t{1} << 16));
        const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int error = errno;
            ::close(fd);
            throw std::runtime_error(path + ": cannot read: " + std::strerror(error));
        }
        if (n == 0) break;
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    bytes.resize(done);
    return bytes;
}

// Standard output for a JSON document, compact or re-indented (--pretty) as its pieces arrive, in
// large writes. A failed write (a full disk, a closed pipe) is an error, not a silently short
// document.
class JsonOutput {
public:
    explicit JsonOutput(bool pretty) : pretty_(pretty) {}

    void write(std::string_view piece) {
        if (!pretty_) return put(piece);
        indented_.clear();
        indenter_.feed(piece, indented_);
        put(indented_);
    }
    // The document's end: a newline, and everything flushed.
    void finish() {
        put("\n");
        if (std::fflush(stdout) != 0) throw std::runtime_error(std::string("writing standard output: ") + std::strerror(errno));
    }

private:
    static void put(std::string_view bytes) {
        if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size())
            throw std::runtime_error(std::string("writing standard output: ") + std::strerror(errno));
    }

    bool pretty_;
    reg::JsonIndenter indenter_{2};
    std::string indented_;
};

// NVML's reading (kernels/hardware), the same anvild and `anvil gpus` use.
reg::Inventory measure_inventory() {
    auto reading = anvil::hardware::read_inventory();
    if (!reading.ok) throw std::runtime_error(reading.error + " (for this command: --inventory FILE)");
    return anvil::host::measured_inventory(reading);
}

reg::Inventory load_inventory(const std::string& path) {
    reg::json doc;
    try {
        doc = reg::json::parse(read_bytes(path));  // an inventory is small: the default limit bounds it
    } catch (const reg::json::exception& e) {
        throw std::runtime_error(path + ": not JSON: " + e.what());
    }
    reg::FieldErrors errors;
    reg::JsonReader reader(errors);
    auto inv = reg::parse_inventory(reg::Node{&doc, ""}, reader, path);
    if (!inv) {
        std::string lines;
        for (const auto& e : errors) lines += "\n" + reg::format_error(path, e);
        throw std::runtime_error("invalid inventory" + lines);
    }
    return *inv;
}

std::string gib(const reg::IntInterval& bytes) {
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

bool still_open(reg::Verdict v) {
    return v == reg::Verdict::unresolved || v == reg::Verdict::benchmark_survivor || v == reg::Verdict::math_qualified;
}

void print_result(const reg::FeasibilityResult& r) {
    using reg::to_string;
    std::cout << "campaign " << r.campaign << ": T_req " << to_string(r.t_req) << " tokens, physical available "
              << to_string(r.physical_available) << " bytes (" << gib(r.physical_available) << "), policy available "
              << to_string(r.policy_available) << " bytes (" << gib(r.policy_available) << ")\n";
    for (const auto& e : r.errors) std::cout << "  error: " << e << "\n";
    for (const auto& c : r.candidates) {
        std::cout << "\n" << c.id << "  " << to_string(c.verdict) << "\n  axes:";
        for (const auto& a : c.axes) {
            std::cout << " " << to_string(a.name) << "=" << to_string(a.status);
            if (a.projected_status && *a.projected_status != reg::AxisStatus::unknown)
                std::cout << "(projected " << to_string(*a.projected_status) << ")";
        }
        std::cout << "\n  demand " << to_string(c.demand) << " bytes (" << gib(c.demand) << "), policy margin "
                  << to_string(c.policy_margin) << " bytes, T_max physical " << to_string(c.physical_t_max) << " / policy "
                  << to_string(c.policy_t_max) << " tokens\n";
        for (const auto& reason : c.reasons) std::cout << "  - " << reason << "\n";
        if (!still_open(c.verdict)) continue;
        // What to measure next only matters for a candidate still in the running.
        std::string absent;
        for (const auto& m : r.missing_evidence(c)) {
            if (m.absent) absent += (absent.empty() ? "" : ", ") + reg::pointer(m, c.index);
            else std::cout << "  missing: " << reg::pointer(m, c.index) << ": " << m.variable->notes << "\n";
        }
        if (!absent.empty()) std::cout << "  absent from the document: " << absent << "\n";
    }
}

void print_assessment(const reg::RecipeAssessment& a) {
    std::cout << "\n" << a.recipe_id << "  " << reg::to_string(a.verdict) << (a.promotable ? "" : "  (not promotable)") << "\n";
    for (const auto& g : a.gates) std::cout << "  " << reg::to_string(g.name) << "=" << reg::to_string(g.status) << ": " << g.reason << "\n";
    for (const auto& b : a.promotion_blockers) std::cout << "  blocks promotion: " << b << "\n";
}

// A model's shape, read from its directory: ${MODEL_ROOT} is --model-root; any other placeholder
// is the daemon's to expand, so the shape stays unknown here.
reg::ModelShapeLookup shapes_under(const std::optional<std::string>& model_root) {
    return [model_root](const reg::ModelRef& model) -> reg::ModelShapeReading {
        std::string path = model.path;
        constexpr std::string_view kRoot = "${MODEL_ROOT}";
        if (path.starts_with(kRoot)) {
            if (!model_root) return {std::nullopt, path + " is under ${MODEL_ROOT}: give --model-root DIR"};
            path = *model_root + path.substr(kRoot.size());
        }
        if (path.find("${") != std::string::npos) return {std::nullopt, path + " holds a placeholder only anvild expands"};
        return reg::read_model_shape(path);
    };
}

struct Inputs {
    std::vector<reg::Document> documents;  // every file, in argument order
    std::vector<const reg::Document*> feasibility, recipes;
    reg::LicenceBook licences;
    std::map<std::string, double> hardware_vram_gb;  // hardware id → nominal GB
};

// Reads every file; prints each invalid one's errors and returns false if any was invalid.
bool read_inputs(const std::vector<std::string>& paths, const reg::DocumentLimits& limits, Inputs& in) {
    bool ok = true;
    for (const auto& path : paths)
        in.documents.push_back(reg::parse_document(read_bytes(path), reg::Provenance{path, "", path, "", ""}, limits));
    for (const auto& doc : in.documents) {
        if (!doc.valid()) {
            for (const auto& line : doc.error_lines()) std::cerr << line << "\n";
            ok = false;
            continue;
        }
        if (doc.kind == reg::DocumentKind::feasibility_input) in.feasibility.push_back(&doc);
        else if (doc.kind == reg::DocumentKind::recipe) in.recipes.push_back(&doc);
        else if (const auto* p = std::get_if<reg::ExternalPriors>(&doc.body)) in.licences.add(*p, doc.provenance.path);
        else if (const auto* h = std::get_if<reg::RegistryRecord>(&doc.body); h && h->vram_gb) in.hardware_vram_gb[h->id] = *h->vram_gb;
    }
    return ok;
}

// The process exits right after the command: freeing the documents' parsed trees (a few hundred MB
// for a campaign of 10,000 candidates) would cost a tenth of the run and give nothing back. They
// stay reachable, so a leak checker does not count them.
void release(Inputs&& in, std::vector<std::unique_ptr<reg::FeasibilityInput>>&& copies) {
    struct Kept {
        Inputs in;
        std::vector<std::unique_ptr<reg::FeasibilityInput>> copies;
    };
    static Kept* kept = nullptr;
    if (!kept) kept = new Kept{std::move(in), std::move(copies)};  // once: one command a process
}

}  // namespace

int feasibility_command(const std::vector<std::string>& words) {
    Arguments args(words, {"--format", "--inventory", "--commercial", "--model-root", "--max-document-bytes"}, {"--pretty"});
    if (args.positional().empty()) throw UsageError("expected a feasibility input or a recipe file");
    const std::string format = args.value_or("--format", "table");
    if (format != "table" && format != "json") throw UsageError("--format must be table or json");
    const bool pretty = args.has("--pretty");
    if (pretty && format != "json") throw UsageError("--pretty indents JSON: give it with --format json");
    const reg::DocumentLimits limits = document_limits(args);
    reg::GateContext context;
    if (auto c = args.value("--commercial")) {
        if (*c != "yes" && *c != "no") throw UsageError("--commercial must be yes or no");
        context.policy.commercial = *c == "yes";
    }

    Inputs in;
    if (!read_inputs(args.positional(), limits, in)) return 1;
    if (in.feasibility.empty() && in.recipes.empty())
        throw UsageError("none of the files is a feasibility input or a recipe: nothing to judge");

    std::optional<reg::Inventory> inventory;
    if (auto i = args.value("--inventory")) inventory = *i == "measure" ? measure_inventory() : load_inventory(*i);

    // The inventory replaces what the document says about this machine's VRAM: then the calculator
    // reads a copy of the input with the requirements replaced; otherwise the document's own input.
    // Results point into their input, which outlives them here (in `in` or `copies`).
    std::vector<std::unique_ptr<reg::FeasibilityInput>> copies;
    std::vector<const reg::FeasibilityInput*> inputs;
    std::vector<reg::FeasibilityResult> results;
    for (const auto* doc : in.feasibility) {
        const auto& input = std::get<reg::FeasibilityInput>(doc->body);
        if (inventory) {
            copies.push_back(std::make_unique<reg::FeasibilityInput>(input));
            copies.back()->requirements = reg::with_inventory(input.requirements, *inventory);
            inputs.push_back(copies.back().get());
        } else {
            inputs.push_back(&input);
        }
        results.push_back(reg::evaluate_feasibility(*inputs.back()));
    }

    context.inventory = inventory ? &*inventory : nullptr;
    context.requirements = inputs.empty() ? nullptr : &inputs.front()->requirements;
    context.licences = &in.licences;
    context.model_shapes = shapes_under(args.value("--model-root"));
    context.host_memory = reg::measure_host_memory();
    std::vector<reg::RecipeAssessment> assessments;
    for (const auto* doc : in.recipes) {
        const reg::Recipe& recipe = *doc->recipe();
        auto hw = in.hardware_vram_gb.find(recipe.hardware_id);
        context.hardware_vram_gb = hw == in.hardware_vram_gb.end() ? std::nullopt : std::optional<double>(hw->second);
        assessments.push_back(reg::assess_recipe(recipe, doc->pins, reg::models_of(*doc), context));
    }

    if (format == "json") {
        JsonOutput out(pretty);
        const reg::JsonSink sink = [&out](std::string_view piece) { out.write(piece); };
        if (results.size() == 1 && assessments.empty()) {
            reg::write_feasibility_json(results.front(), sink);
        } else {
            // The report's small parts go through nlohmann; the feasibility results, which may be
            // tens of MB, stream from the calculator's writer.
            const reg::json commercial = context.policy.commercial ? reg::json(*context.policy.commercial) : reg::json();
            out.write(R"({"schema":"anvil.feasibility-report/v1","inventory":)");
            out.write((inventory ? inventory->to_json() : reg::json()).dump());
            out.write(R"(,"host_memory":)");
            out.write((context.host_memory ? context.host_memory->to_json() : reg::json()).dump());
            out.write(R"(,"licence_policy":)");
            out.write(reg::json{{"commercial", commercial}}.dump());
            out.write(R"(,"feasibility":[)");
            for (std::size_t i = 0; i < results.size(); ++i) {
                if (i > 0) out.write(",");
                reg::write_feasibility_json(results[i], sink);
            }
            out.write(R"(],"recipes":[)");
            for (std::size_t i = 0; i < assessments.size(); ++i) {
                if (i > 0) out.write(",");
                out.write(assessments[i].to_json().dump());
            }
            out.write("]}");
        }
        out.finish();
        release(std::move(in), std::move(copies));
        return 0;
    }
    if (inventory) {
        std::cout << "inventory (" << inventory->source << "): " << inventory->gpus.size() << " GPUs, collectives "
                  << reg::to_string(inventory->collectives) << "\n";
    }
    for (const auto& r : results) print_result(r);
    if (!assessments.empty()) {
        std::cout << (results.empty() ? "" : "\n") << "recipes against this machine"
                  << (context.requirements ? "" : " (no feasibility input: context requirement unknown)") << ":\n";
        for (const auto& a : assessments) print_assessment(a);
    }
    release(std::move(in), std::move(copies));
    return 0;
}

}  // namespace anvil::cli
