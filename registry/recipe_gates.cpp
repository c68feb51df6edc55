#include "registry/recipe_gates.hpp"
#include "support/text.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

namespace anvil::registry {

namespace {

std::string gpus(std::int64_t n) { return std::to_string(n) + (n == 1 ? " GPU" : " GPUs"); }

bool is_proof(EvidenceStatus s) { return s == EvidenceStatus::measured || s == EvidenceStatus::confirmed; }

const char* kNoInventory = "no inventory: measure the GPUs (--inventory measure) or declare them in configuration";

const char* kRunsOnCpu = "runs on the CPU: needs no GPU";

Gate gpu_count(const Recipe& r, const GateContext& ctx) {
    Gate g{GateName::gpu_count, AxisStatus::unknown, kNoInventory};
    if (r.runs_on_cpu()) return {GateName::gpu_count, AxisStatus::pass, kRunsOnCpu};
    if (!ctx.inventory) return g;
    const auto have = static_cast<std::int64_t>(ctx.inventory->gpus.size());
    g.status = have >= r.hardware_count ? AxisStatus::pass : AxisStatus::fail;
    g.reason = "needs " + gpus(r.hardware_count) + ", " + ctx.inventory->scope + " has " + std::to_string(have);
    return g;
}

Gate gpu_memory(const Recipe& r, const GateContext& ctx) {
    Gate g{GateName::gpu_memory, AxisStatus::unknown, kNoInventory};
    if (r.runs_on_cpu()) return {GateName::gpu_memory, AxisStatus::pass, kRunsOnCpu};
    if (!ctx.inventory) return g;
    if (!ctx.hardware_vram_gb) {
        g.reason = "the memory each GPU needs is unknown: hardware record " + r.hardware_id + " is not in the registry";
        return g;
    }
    const std::int64_t need = std::min<std::int64_t>(r.hardware_count, static_cast<std::int64_t>(ctx.inventory->gpus.size()));
    if (need == 0) {
        g.reason = "no GPU in the inventory to hold the model";
        return g;
    }
    // Registry hardware records give nominal decimal gigabytes ("96 GB" for 97887 MiB).
    const auto required = static_cast<std::int64_t>(std::ceil(*ctx.hardware_vram_gb * 1e9));
    std::int64_t surely = 0, possibly = 0;
    for (const auto& gpu : ctx.inventory->gpus) {
        const IntInterval total = to_int_interval(gpu.total_bytes);
        const Outcome o = compare(total, Comparison::at_least, IntInterval::exact(required));
        surely += o == Outcome::pass;
        possibly += o != Outcome::fail;
    }
    g.status = surely >= need ? AxisStatus::pass : possibly < need ? AxisStatus::fail : AxisStatus::unknown;
    g.reason = "each GPU needs " + to_string(*ctx.hardware_vram_gb) + " GB (hardware " + r.hardware_id + "): " +
               std::to_string(surely) + " of " + std::to_string(ctx.inventory->gpus.size()) + " GPUs surely have it, " +
               std::to_string(need) + " needed";
    return g;
}

Gate context(const Recipe& r, const GateContext& ctx) {
    Gate g{GateName::context, AxisStatus::unknown, ""};
    if (!r.serving.max_context_tokens) {
        g.reason = "the recipe states no maximum context (serving.max_context_tokens)";
        return g;
    }
    if (!ctx.requirements) {
        g.reason = "no context requirement given";
        return g;
    }
    IntInterval t_req = IntInterval::exact(0);
    try {
        for (const auto& [name, v] : ctx.requirements->tokens) t_req = t_req + to_int_interval(v);
    } catch (const ArithmeticOverflow& e) {
        g.reason = std::string("T_req cannot be computed exactly: ") + e.what();
        return g;
    }
    const IntInterval limit = IntInterval::exact(*r.serving.max_context_tokens);
    const Outcome o = compare(limit, Comparison::at_least, t_req);
    g.status = o == Outcome::pass ? AxisStatus::pass : o == Outcome::fail ? AxisStatus::fail : AxisStatus::unknown;
    g.reason = "max context " + to_string(limit) + (o == Outcome::fail ? " < " : o == Outcome::pass ? " >= " : " vs ") + "T_req " +
               to_string(t_req) + " tokens";
    return g;
}

Gate pinning(const PinStatus& pins) {
    if (pins.pinned()) return {GateName::pinning, AxisStatus::pass, "image and models pinned by digest or commit"};
    return {GateName::pinning, AxisStatus::fail, fmt::format("unpinned: {}", fmt::join(pins.unpinned_reasons, "; "))};
}

Gate licence(const std::vector<ModelUse>& models, const GateContext& ctx) {
    Gate g{GateName::licence, AxisStatus::unknown, ""};
    if (ctx.policy.commercial == false) {
        g.status = AxisStatus::pass;
        g.reason = "non-commercial deployment: the licence policy restricts nothing further";
        return g;
    }
    if (models.empty()) {
        g.reason = "the recipe names no hub repository, so its licences are unknown";
        return g;
    }
    std::vector<std::string> non_commercial, unrecorded, permitted;
    for (const auto& m : models) {
        const LicenceBook::Entry* e = ctx.licences ? ctx.licences->find(m.repository) : nullptr;
        // A hub record wins over the recipe's own word; a local model has only the recipe's.
        const LicenceBook::Entry declared{m.declared_licence.value_or(""), "the recipe"};
        if (!e && m.declared_licence) e = &declared;
        if (!e) unrecorded.push_back(m.repository + " (" + m.role + ")");
        else if (is_non_commercial(e->licence))
            non_commercial.push_back(m.repository + " (" + m.role + ") is " + e->licence + " per " + e->source);
        else permitted.push_back(m.repository + " is " + e->licence);
    }
    if (!non_commercial.empty()) {
        g.status = ctx.policy.commercial == true ? AxisStatus::fail : AxisStatus::unknown;
        g.reason = fmt::format("{}", fmt::join(non_commercial, "; ")) + (ctx.policy.commercial == true
                                                     ? ": refused for a commercial deployment"
                                                     : ": allowed only for non-commercial use, and the licence policy does not say "
                                                       "whether this deployment is commercial");
        return g;
    }
    if (!unrecorded.empty()) {
        g.reason = fmt::format("no licence recorded for {}", fmt::join(unrecorded, ", "));
        return g;
    }
    g.status = AxisStatus::pass;
    g.reason = fmt::format("{}", fmt::join(permitted, "; "));
    return g;
}

// What an estimate holds of weights alone: on a GPU the host holds the weights while the engine
// reads and uploads them (converted once, or the files' mapping), and its KV cache lives on the device.
EmbeddedMemory weights_only(const EmbeddedMemory& m) {
    EmbeddedMemory out;
    out.total = IntInterval::exact(0);
    for (const auto& p : m.parts)
        if (p.what.find("weights") != std::string::npos) {
            out.parts.push_back(p);
            out.total = out.total + p.bytes;
        }
    for (const auto& u : m.unknowns) {
        const auto colon = u.find(": ");  // "<part>: why", or a problem of the whole launch
        if (colon == std::string::npos || u.substr(0, colon).find("weights") != std::string::npos) out.unknowns.push_back(u);
    }
    return out;
}

// The embedded engine holds its weights, KV cache and draft in this host's memory (on a GPU, its
// weights only). The demand is a model of the engine (estimated), so a shortfall is at most
// modeled-infeasible.
Gate host_memory(const Recipe& r, const GateContext& ctx) {
    Gate g{GateName::host_memory, AxisStatus::unknown, ""};
    const bool on_gpu = !r.runs_on_cpu();
    const EmbeddedMemory m = on_gpu ? weights_only(estimate_embedded_gpu_memory(r, ctx.model_shapes))
                                    : estimate_embedded_memory(r, ctx.model_shapes);
    if (!m.unknowns.empty()) {
        g.reason = fmt::format("the embedded engine's memory is unknown: {}", fmt::join(m.unknowns, "; "));
        return g;
    }
    const std::string need = std::string("the embedded engine needs ") + to_string(m.total) + " bytes" +
                             (on_gpu ? " here (its KV cache is on the GPU)" : "") + ", estimated: " + m.describe();
    if (!ctx.host_memory) {
        g.reason = need + "; this host's memory is unknown";
        return g;
    }
    const IntInterval have = to_int_interval(*ctx.host_memory);
    const Outcome o = compare(have, Comparison::at_least, m.total);
    g.status = o == Outcome::pass ? AxisStatus::pass : o == Outcome::fail ? AxisStatus::fail : AxisStatus::unknown;
    g.reason = need + (o == Outcome::pass ? "; this host has " : o == Outcome::fail ? "; more than this host's " : "; this host has ") +
               to_string(have) + " bytes (" + ctx.host_memory->source + ", " + std::string(to_string(ctx.host_memory->status)) + ")";
    return g;
}

// The embedded engine on a GPU (engine/cuda_model_runner.cpp) runs on one of them and starts only
// when --gpu-memory-utilization of it holds the weights and one context of KV cache. The demand is
// a model of the engine, so a shortfall is at most modeled-infeasible, as host_memory's.
Gate engine_gpu_memory(const Recipe& r, const GateContext& ctx) {
    Gate g{GateName::engine_gpu_memory, AxisStatus::unknown, ""};
    const EmbeddedMemory m = estimate_embedded_gpu_memory(r, ctx.model_shapes);
    if (!m.unknowns.empty()) {
        g.reason = fmt::format("the embedded engine's GPU memory is unknown: {}", fmt::join(m.unknowns, "; "));
        return g;
    }
    const std::optional<double> fraction = embedded_gpu_fraction(r.launch);
    if (!fraction) {
        g.reason = "launch argument --gpu-memory-utilization is not a fraction above 0 and at most 1";
        return g;
    }
    const std::string need = "the embedded engine needs " + to_string(m.total) + " bytes of one GPU, estimated: " + m.describe() +
                             "; it may take " + to_string(*fraction) + " of it";
    if (!ctx.inventory || ctx.inventory->gpus.empty()) {
        g.reason = need + "; " + (ctx.inventory ? std::string("the inventory has no GPU") : std::string(kNoInventory));
        return g;
    }
    // total x fraction >= need, in whole thousandths so that the interval maths stays integral.
    const auto thousandths = static_cast<std::int64_t>(std::floor(*fraction * 1000.0));
    std::int64_t surely = 0, possibly = 0;
    for (const auto& gpu : ctx.inventory->gpus) {
        const Outcome o = compare(to_int_interval(gpu.total_bytes) * IntInterval::exact(thousandths), Comparison::at_least,
                                  m.total * IntInterval::exact(1000));
        surely += o == Outcome::pass;
        possibly += o != Outcome::fail;
    }
    g.status = surely >= 1 ? AxisStatus::pass : possibly == 0 ? AxisStatus::fail : AxisStatus::unknown;
    g.reason = need + ": " + std::to_string(surely) + " of " + std::to_string(ctx.inventory->gpus.size()) + " GPUs surely hold it";
    return g;
}

Gate collectives(const Recipe& r, const GateContext& ctx) {
    const std::int64_t tp = r.effective_tensor_parallel();
    const std::string what = "tensor parallelism " + std::to_string(tp);
    if (tp <= 1) return {GateName::collectives, AxisStatus::pass, what + " needs no collective path"};
    if (!ctx.inventory) return {GateName::collectives, AxisStatus::unknown, what + " needs a proven collective path; " + kNoInventory};
    const std::string notes = ctx.inventory->collectives_notes.empty() ? "" : " (" + ctx.inventory->collectives_notes + ")";
    switch (ctx.inventory->collectives) {
        case CollectivePath::proven: return {GateName::collectives, AxisStatus::pass, what + ": collective path proven on this host" + notes};
        case CollectivePath::failed: return {GateName::collectives, AxisStatus::fail, what + ": the collective path failed on this host" + notes};
        case CollectivePath::unknown: break;
    }
    return {GateName::collectives, AxisStatus::unknown, what + " needs a proven collective path on this host (unknown until probed)" + notes};
}

}  // namespace

void LicenceBook::add(std::string_view repository, std::string licence, std::string source) {
    by_repository_[support::ascii_lower(repository)] = Entry{std::move(licence), std::move(source)};
}

void LicenceBook::add(const ExternalPriors& priors, const std::string& source) {
    if (priors.candidate.license) add(priors.candidate.model, *priors.candidate.license, source);
    if (priors.draft && priors.draft->license) add(priors.draft->model, *priors.draft->license, source);
}

const LicenceBook::Entry* LicenceBook::find(std::string_view repository) const {
    auto it = by_repository_.find(support::ascii_lower(repository));
    return it == by_repository_.end() ? nullptr : &it->second;
}

bool is_non_commercial(std::string_view licence) {
    const std::string l = support::ascii_lower(licence);
    return l.starts_with("cc-by-nc") || l.find("-nc-") != std::string::npos || l.find("noncommercial") != std::string::npos ||
           l.find("non-commercial") != std::string::npos;
}

std::string_view to_string(GateName g) {
    switch (g) {
        case GateName::gpu_count: return "gpu_count";
        case GateName::gpu_memory: return "gpu_memory";
        case GateName::context: return "context";
        case GateName::pinning: return "pinning";
        case GateName::licence: return "licence";
        case GateName::collectives: return "collectives";
        case GateName::host_memory: return "host_memory";
        case GateName::engine_gpu_memory: return "engine_gpu_memory";
    }
    return "?";
}

std::vector<ModelUse> models_of(const Recipe& recipe) {
    std::vector<ModelUse> out;
    if (const auto& m = recipe.launch.model) {
        if (m->repository) out.push_back({*m->repository, "served model", m->licence});
        else if (m->licence) out.push_back({m->path, "served model", m->licence});
    }
    // A draft model is loaded and run like the served one: its licence binds the deployment too,
    // and it is listed by the same rule.
    if (const auto& d = recipe.launch.draft; d && d->model) {
        const ModelRef& m = *d->model;
        if (m.repository) out.push_back({*m.repository, "draft model", m.licence});
        else if (m.licence) out.push_back({m.path, "draft model", m.licence});
    }
    for (const auto& m : recipe.launch.mounts)
        if (m.provision) out.push_back({m.provision->repository, "mounted at " + m.target, std::nullopt});
    return out;
}

std::vector<ModelUse> models_of(const Document& doc) {
    std::vector<ModelUse> out;
    if (const Recipe* r = doc.recipe()) out = models_of(*r);
    const Recipe* r = doc.recipe();
    if (r && r->huggingface_repository) {
        const std::string& repo = *r->huggingface_repository;
        const bool listed = std::any_of(out.begin(), out.end(), [&](const ModelUse& m) { return support::ascii_lower(m.repository) == support::ascii_lower(repo); });
        if (!listed) out.insert(out.begin(), ModelUse{repo, "served model", std::nullopt});
    }
    return out;
}

RecipeAssessment assess_recipe(const Recipe& recipe, const PinStatus& pins, const std::vector<ModelUse>& models,
                               const GateContext& ctx) {
    RecipeAssessment a;
    a.recipe_id = recipe.id;
    a.gates = {gpu_count(recipe, ctx), gpu_memory(recipe, ctx), context(recipe, ctx),
               pinning(pins),          licence(models, ctx),    collectives(recipe, ctx)};
    if (recipe.launch.kind == "embedded") a.gates.push_back(host_memory(recipe, ctx));
    if (recipe.launch.kind == "embedded" && !recipe.runs_on_cpu()) a.gates.push_back(engine_gpu_memory(recipe, ctx));
    const Gate& count = a.gates[0];
    const Gate& memory = a.gates[1];
    const Gate& lic = a.gates[4];
    // Hardware gates rest on the inventory's evidence; the context and collective gates on the
    // recipe's own launch limit and a local probe, which are facts of this host.
    const bool hardware_proof = ctx.inventory && is_proof(ctx.inventory->evidence());

    bool proven = false, modeled = false;
    for (const Gate& g : a.gates) {
        if (g.status != AxisStatus::fail || g.name == GateName::pinning || g.name == GateName::licence) continue;
        const bool on_hardware = &g == &count || &g == &memory;
        const bool engine_model = g.name == GateName::host_memory || g.name == GateName::engine_gpu_memory;
        if ((on_hardware && !hardware_proof) || engine_model) modeled = true;
        else proven = true;
        a.reasons.push_back(g.reason);
    }
    if (proven || modeled) {
        a.verdict = proven ? Verdict::proven_infeasible : Verdict::modeled_infeasible;
    } else if (lic.status == AxisStatus::fail) {
        a.verdict = Verdict::policy_infeasible;
        a.reasons.push_back(lic.reason);
    } else {
        for (const Gate& g : a.gates)
            if (g.status == AxisStatus::unknown && g.name != GateName::licence) a.reasons.push_back(std::string(to_string(g.name)) + ": " + g.reason);
        if (!a.reasons.empty()) {
            a.verdict = Verdict::unresolved;
        } else {
            a.verdict = Verdict::benchmark_survivor;
            a.reasons.push_back("every gate passes on paper; only local qualification authorizes promotion");
        }
    }

    if (!pins.pinned()) a.promotion_blockers.push_back(a.gates[3].reason);
    if (lic.status != AxisStatus::pass) a.promotion_blockers.push_back("licence: " + lic.reason);
    if (a.verdict != Verdict::unresolved && a.verdict != Verdict::benchmark_survivor)
        a.promotion_blockers.push_back("ruled out here: " + std::string(to_string(a.verdict)));
    a.promotable = a.promotion_blockers.empty();
    return a;
}

json RecipeAssessment::to_json() const {
    json gates_json = json::object();
    for (const auto& g : gates) gates_json[std::string(to_string(g.name))] = {{"status", std::string(to_string(g.status))}, {"reason", g.reason}};
    return {{"id", recipe_id},
            {"class", std::string(to_string(verdict))},
            {"reasons", reasons},
            {"promotable", promotable},
            {"promotion_blockers", promotion_blockers},
            {"gates", gates_json}};
}

}  // namespace anvil::registry
