// The pass's judge step, feasibility on paper. In: revisions new to the ledger (from the registry step,
// or left without a verdict by a crash) and the gate inputs (licences, hardware records, this
// host's memory, model shapes, the inventory). Out: a `feasibility` verdict each, and `rejected`
// for what cannot or must not run, in two transactions per batch. Also answers the API's
// feasibility view with the same inputs.
#include "daemon/controller/reconciler.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "daemon/controller/revision_document.hpp"
#include "registry/host_memory.hpp"

namespace anvil::daemon {

using state::Status;

std::shared_ptr<const Reconciler::GateInputs> Reconciler::gate_inputs() const {
    // Licences and hardware records change only with a catalog: gathered once per set of commits,
    // not once per recipe judged (10,000 recipes would otherwise read 10,000 documents each).
    std::lock_guard lock(mutex_);
    std::string key;
    for (const auto& watch : watches_) key += watch->catalog().commit() + ":" + std::to_string(watch->catalog().size()) + ";";
    key += "inventory:" + std::to_string(inventory_generation_);
    if (gate_inputs_ && gate_inputs_key_ == key) return gate_inputs_;
    auto inputs = std::make_shared<GateInputs>();
    for (const auto& watch : watches_) {
        for (const auto& [path, doc] : watch->catalog().documents()) {
            if (!doc.valid()) continue;
            if (doc.kind == registry::DocumentKind::external_priors) {
                if (const auto* priors = std::get_if<registry::ExternalPriors>(&doc.body)) inputs->licences.add(*priors, path);
            } else if (doc.kind == registry::DocumentKind::hardware) {
                if (const auto* rec = std::get_if<registry::RegistryRecord>(&doc.body); rec && rec->vram_gb) inputs->vram_gb.emplace(doc.id, *rec->vram_gb);
            }
        }
    }
    inputs->host_memory = registry::measure_host_memory();
    inputs->inventory = inventory_;
    gate_inputs_ = std::move(inputs);
    gate_inputs_key_ = key;
    return gate_inputs_;
}

registry::GateContext Reconciler::gate_context(const registry::Recipe& recipe, const std::shared_ptr<const GateInputs>& inputs) const {
    registry::GateContext ctx;
    ctx.inventory = inputs->inventory.get();
    ctx.requirements = config_.requirements ? &*config_.requirements : nullptr;
    ctx.policy.commercial = config_.commercial;
    ctx.licences = &inputs->licences;
    if (auto it = inputs->vram_gb.find(recipe.hardware_id); it != inputs->vram_gb.end()) ctx.hardware_vram_gb = it->second;
    ctx.host_memory = inputs->host_memory;
    // A model's shape is read where a launch would find it: placeholders expanded, inside the
    // allowed roots (a path that is not is refused on paper anyway, and says so there).
    ctx.model_shapes = [this, cache = inputs->model_shapes, guard = inputs->model_shapes_mutex](const registry::ModelRef& model) -> registry::ModelShapeReading {
        std::filesystem::path dir;
        try {
            dir = engines_->model_directory(model, "model directory");
        } catch (const std::exception& e) {
            return {std::nullopt, e.what()};
        }
        {
            std::lock_guard lock(*guard);  // the API's feasibility view reads shapes too
            if (auto it = cache->find(dir.string()); it != cache->end()) return it->second;
        }
        // Only a shape is kept: a directory not there yet (a model still being made) is read again.
        auto reading = registry::read_model_shape(dir);
        std::lock_guard lock(*guard);
        if (reading.shape) cache->emplace(dir.string(), reading);
        return reading;
    };
    return ctx;
}

void Reconciler::judge(const std::vector<std::pair<state::Id, const registry::Document*>>& revisions) {
    if (revisions.empty()) return;
    // On paper first (pure), then every verdict and refusal of the batch in two transactions.
    const auto inputs = gate_inputs();
    std::vector<state::VerdictRow> verdicts;
    std::vector<std::string> refusal_reasons;
    for (const auto& [revision_id, doc] : revisions) {
        const registry::Recipe& recipe = *doc->recipe();
        const auto a = registry::assess_recipe(recipe, doc->pins, registry::models_of(*doc), gate_context(recipe, inputs));
        std::vector<std::string> refusals;
        const bool infeasible = a.verdict == registry::Verdict::proven_infeasible || a.verdict == registry::Verdict::modeled_infeasible ||
                                a.verdict == registry::Verdict::policy_infeasible;
        if (infeasible) refusals = a.reasons;
        if (!doc->pins.pinned())
            for (const auto& r : doc->pins.unpinned_reasons) refusals.push_back("unpinned: " + r);
        if (auto why = engines_->unsupported(recipe)) refusals.push_back(*why);
        std::vector<std::string> reasons = a.reasons;
        for (const auto& g : a.gates)
            reasons.push_back(std::string(registry::to_string(g.name)) + "=" + std::string(registry::to_string(g.status)) + ": " + g.reason);
        const state::GateResult result = !refusals.empty() ? state::GateResult::fail
                                         : a.verdict == registry::Verdict::benchmark_survivor ? state::GateResult::pass
                                                                                              : state::GateResult::unknown;
        verdicts.push_back({0, revision_id, "feasibility", result, std::string(registry::to_string(a.verdict)), reasons, {}, ""});
        refusal_reasons.push_back(refusals.empty() ? std::string() : fmt::format("refused on paper: {}", fmt::join(refusals, "; ")));
    }
    const auto ids = store_.add_verdicts(verdicts);
    std::vector<state::TransitionRequest> rejections;
    for (std::size_t i = 0; i < revisions.size(); ++i)
        if (!refusal_reasons[i].empty())
            rejections.push_back({revisions[i].first, Status::rejected, refusal_reasons[i], "reconciler", {}, {ids[i]}, std::nullopt});
    record_transitions(rejections);
}

void Reconciler::judge_stragglers() {
    std::vector<registry::Document> docs;
    std::vector<state::Id> ids;
    for (state::Id id : store_.candidates_without_feasibility(1000)) {
        auto revision = store_.revision(id);
        if (!revision) continue;
        if (auto doc = document_of(*revision)) docs.push_back(std::move(*doc)), ids.push_back(id);
    }
    std::vector<std::pair<state::Id, const registry::Document*>> batch;
    for (std::size_t i = 0; i < docs.size(); ++i) batch.emplace_back(ids[i], &docs[i]);
    judge(batch);
}

std::optional<nlohmann::json> Reconciler::feasibility_of(const std::string& recipe_id) const {
    // The document is copied out under the lock; the assessment runs without it.
    std::optional<registry::Document> doc;
    std::string source, commit;
    {
        std::lock_guard lock(mutex_);
        for (const auto& w : watches_) {
            const auto* found = w->catalog().find(registry::DocumentKind::recipe, recipe_id);
            if (!found || !found->recipe()) continue;
            doc = *found;
            source = w->config().name;
            commit = w->catalog().commit();
            break;
        }
    }
    if (!doc) return std::nullopt;
    const auto inputs = gate_inputs();
    auto a = registry::assess_recipe(*doc->recipe(), doc->pins, registry::models_of(*doc), gate_context(*doc->recipe(), inputs));
    nlohmann::json out = a.to_json();
    out["source"] = source;
    out["commit"] = commit;
    std::lock_guard lock(mutex_);
    out["inventory"] = inventory_note_;
    return out;
}

}  // namespace anvil::daemon
