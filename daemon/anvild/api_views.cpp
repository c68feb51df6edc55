#include "daemon/anvild/api_views.hpp"


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
    for (Status s : {Status::candidate, Status::qualifying, Status::validated, Status::promoted, Status::retired, Status::rejected, Status::failed}) {
        state::RecipeFilter f;
        f.status = std::string(state::to_string(s));
        f.limit = 0;
        counts[std::string(state::to_string(s))] = store.list_recipes(f).total;
    }
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

json inventory_view(const Reconciler& reconciler) {
    const auto [inventory, note] = reconciler.inventory();
    return {{"source", note}, {"inventory", inventory ? inventory->to_json() : json(nullptr)}};
}

}  // namespace anvil::daemon
