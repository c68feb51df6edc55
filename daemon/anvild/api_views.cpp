#include "daemon/anvild/api_views.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include "support/digest.hpp"


namespace anvil::daemon {

using json = nlohmann::json;
using state::Status;

json status_view(const Reconciler& reconciler, const state::Store& store) {
    json out;
    const auto current = store.current_default();
    out["default"] = current ? json{{"recipe_id", current->recipe_id}, {"revision_id", current->id}} : json(nullptr);
    const auto pin = store.pin();
    const auto freeze = store.freeze();
    out["policy"] = {{"mode", std::string(qualify::to_string(reconciler.config().promotion.policy))},
                     {"frozen", freeze.has_value()},
                     {"freeze", freeze ? json(*freeze) : json(nullptr)},
                     {"pinned", pin ? json(pin->recipe_id) : json(nullptr)}};
    json counts = json::object();
    for (const auto& [status, n] : store.recipes_by_status()) counts[std::string(state::to_string(status))] = n;
    out["recipes"] = counts;
    out["engines"] = reconciler.engines().size();
    const auto qualifying = reconciler.qualifying();
    out["qualifying"] = qualifying ? json(*qualifying) : json(nullptr);
    const auto upstream = reconciler.upstream();
    out["endpoint"] = {{"address", reconciler.config().serve.str()},
                       {"upstream", upstream ? json{{"engine_id", upstream->engine_id}, {"recipe_id", upstream->recipe_id}, {"port", upstream->port}}
                                             : json(nullptr)}};
    out["conditions"] = json::array();
    for (const auto& [type, c] : reconciler.conditions())
        out["conditions"].push_back({{"type", type}, {"status", c.ok ? "True" : "False"}, {"reason", c.reason}, {"message", c.message}, {"since", c.since}});
    out["last_pass"] = reconciler.last_pass();
    const auto [inventory, note] = reconciler.inventory();
    out["inventory"] = {{"source", note}, {"gpus", inventory ? inventory->gpus.size() : 0}};
    return out;
}

json registry_view(const Reconciler& reconciler) {
    json out = json::array();
    for (const auto& s : reconciler.sources()) {
        json invalid = json::array();
        for (const auto& [path, problems] : s.invalid) invalid.push_back({{"path", path}, {"problems", problems}});
        out.push_back({{"name", s.config.name}, {"url", s.config.url}, {"ref", s.config.ref}, {"commit", s.commit},
                       {"last_sync", s.last_sync_at}, {"last_error", s.last_error ? json(*s.last_error) : json(nullptr)},
                       {"documents", s.documents}, {"invalid", invalid}});
    }
    return out;
}

json cluster_view(const drivers::SlurmPlacement& placement) {
    const drivers::SlurmRest rest(placement.rest);
    json out{{"placement", {{"kind", "slurm"}, {"rest", placement.rest.address}, {"user", placement.rest.user},
                            {"partition", placement.partition}, {"account", placement.account},
                            {"time_limit_minutes", placement.time_limit.count()}, {"gpu_memory_mib", placement.gpu_memory_mib}}}};
    try {
        out.update(rest.nodes().to_json());
    } catch (const drivers::SlurmError& e) {
        out["error"] = e.what();
    }
    return out;
}

json inventory_view(const Reconciler& reconciler) {
    const auto [inventory, note] = reconciler.inventory();
    return {{"source", note}, {"inventory", inventory ? inventory->to_json() : json(nullptr)}};
}

namespace {

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json decision_json(const qualify::Decision& d) {
    return {{"action", std::string(qualify::to_string(d.action))}, {"reason", d.reason}, {"checks", d.checks}};
}

json contender_json(const qualify::Contender& c) {
    return {{"revision_id", c.revision_id},
            {"recipe_id", c.recipe_id},
            {"hard_gates_passed", c.hard_gates_passed},
            {"control_revision_id", c.control_revision_id ? json(*c.control_revision_id) : json(nullptr)},
            {"metrics", c.metrics}};
}

constexpr std::uintmax_t kMaxReceiptBytes = 64u << 20;

}  // namespace

json thresholds_json(const qualify::Thresholds& t) {
    return {{"max_relative_quality_loss", t.max_relative_quality_loss},
            {"min_warm_e2e_gain", t.min_warm_e2e_gain},
            {"min_tasks_per_hour_ratio", t.min_tasks_per_hour_ratio},
            {"min_deterministic_pass_rate", t.min_deterministic_pass_rate},
            {"margin", t.margin},
            {"limits",
             {{"relative_quality_loss_at_most", t.max_relative_quality_loss - t.margin},
              {"warm_e2e_gain_at_least", t.min_warm_e2e_gain + t.margin},
              {"tasks_per_hour_ratio_at_least", t.min_tasks_per_hour_ratio + t.margin}}}};
}

json decisions_view(const Reconciler::PromotionPicture& p, const state::Store& store) {
    json out;
    out["thresholds"] = thresholds_json(p.thresholds);
    out["policy"] = {{"mode", std::string(qualify::to_string(p.policy.policy))},
                     {"frozen", p.policy.freeze.has_value()},
                     {"freeze_reason", p.policy.freeze ? json(p.policy.freeze->reason) : json(nullptr)},
                     {"pinned", p.policy.pin ? json(p.policy.pin->recipe_id) : json(nullptr)},
                     {"min_interval_seconds", p.policy.min_interval.count()}};
    out["choice"] = {{"action", std::string(qualify::to_string(p.choice.action))},
                     {"condition", std::string(qualify::to_string(p.choice.condition))},
                     {"reason", p.choice.reason},
                     {"revision_id", p.choice.revision_id ? json(*p.choice.revision_id) : json(nullptr)}};
    out["control"] = p.control ? contender_json(*p.control) : json(nullptr);
    if (p.control && p.current) {
        // Why it is the default: the transition that promoted it.
        if (const auto detail = store.recipe(p.current->recipe_id))
            for (const auto& t : detail->history)
                if (t.revision_id == p.current->id && t.to == state::Status::promoted)
                    out["control"]["promoted"] = {{"reason", t.reason}, {"actor", t.actor}, {"at", t.created_at}};
    }
    out["candidates"] = json::array();
    for (std::size_t i = 0; i < p.contenders.size(); ++i) {
        const auto& c = p.contenders[i];
        json entry = contender_json(c);
        entry["status"] = std::string(state::to_string(p.validated[i].status));
        entry["measured_against_default"] = p.control && c.control_revision_id == p.control->revision_id;
        if (p.control) {
            const auto numbers = qualify::compare_with(c, *p.control);
            entry["comparison"] = {{"relative_quality_loss", optional_number(numbers.relative_quality_loss)},
                                   {"warm_e2e_gain", optional_number(numbers.warm_e2e_gain)},
                                   {"tasks_per_hour_ratio", optional_number(numbers.tasks_per_hour_ratio)}};
        } else {
            entry["comparison"] = nullptr;
        }
        entry["decision"] = decision_json(p.decisions[i]);
        entry["chosen"] = p.choice.action == qualify::Action::promote && p.choice.revision_id == c.revision_id;
        out["candidates"].push_back(std::move(entry));
    }
    return out;
}

json receipts_view(const state::RecipeDetail& recipe, const state::Store& store, const qualify::Thresholds& thresholds) {
    json out = json::array();
    std::set<std::string> seen;
    // Newest evidence first, so the newest receipt comes first.
    for (auto it = recipe.evidence.rbegin(); it != recipe.evidence.rend(); ++it) {
        const auto& e = *it;
        if (!e.receipt_path || !e.receipt_sha256 || !seen.insert(*e.receipt_path).second) continue;
        json r = {{"file", std::filesystem::path(*e.receipt_path).filename().string()},
                  {"sha256", *e.receipt_sha256},
                  {"revision_id", e.revision_id},
                  {"recorded_at", e.observed_at},
                  {"verified", false},
                  {"error", nullptr}};
        // The control its comparison was made against, from the evidence of the same receipt.
        std::optional<state::Id> control;
        for (const auto& other : recipe.evidence)
            if (other.receipt_path == e.receipt_path && other.control_revision_id) control = other.control_revision_id;
        r["control"] = nullptr;
        if (control) {
            json c = {{"revision_id", *control}, {"recipe_id", nullptr}, {"measurements", json::object()}};
            if (const auto row = store.revision(*control)) {
                c["recipe_id"] = row->recipe_id;
                if (const auto detail = row->recipe_id == recipe.id ? std::optional(recipe) : store.recipe(row->recipe_id))
                    c["measurements"] = state::local_measurements(*detail, *control);
            }
            r["control"] = std::move(c);
        }
        std::error_code ec;
        const auto size = std::filesystem::file_size(*e.receipt_path, ec);
        if (ec) {
            r["error"] = "the receipt " + *e.receipt_path + " cannot be read: " + ec.message();
        } else if (size > kMaxReceiptBytes) {
            r["error"] = "the receipt " + *e.receipt_path + " is larger than 64 MiB; not read";
        } else {
            std::ifstream in(*e.receipt_path, std::ios::binary);
            std::ostringstream bytes;
            bytes << in.rdbuf();
            const std::string text = bytes.str();
            if (support::sha256_hex(text) != *e.receipt_sha256) {
                r["error"] = "the receipt " + *e.receipt_path + " has changed since it was recorded (its sha256 differs from the ledger's)";
            } else {
                r["verified"] = true;
                const json receipt = json::parse(text, nullptr, false);
                if (receipt.is_object()) {
                    for (const char* key : {"started_at", "finished_at", "hard_gates_passed", "gates", "measurements", "notes", "plan"})
                        r[key] = receipt.value(key, json(nullptr));
                    json quality = receipt.value("quality", json(nullptr));
                    r["quality"] = quality;
                    r["target"] = receipt.value("target", json(nullptr));
                } else {
                    r["error"] = "the receipt " + *e.receipt_path + " is not a JSON object";
                }
            }
        }
        out.push_back(std::move(r));
    }
    return {{"thresholds", thresholds_json(thresholds)}, {"receipts", out}};
}

}  // namespace anvil::daemon
