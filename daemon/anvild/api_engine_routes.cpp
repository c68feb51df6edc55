// GET /api/v1/engines (the ledger's rows, with what anvild tracks and measures now) and an engine's log.
#include "daemon/anvild/api_routes.hpp"

#include "engine/http/safe_text.hpp"

namespace anvil::daemon {

using json = nlohmann::json;

void add_engine_routes(ApiRoutes& routes, ApiContext& api) {
    routes.get("/api/v1/engines", "/api/v1/engines", [api](const httplib::Request&, httplib::Response& res, const std::string&) {
        json data = json::array();
        const auto live = api.reconciler.engines();
        for (const auto& row : api.store.running_engines()) {
            json e = {{"id", row.id}, {"engine_id", row.engine_key}, {"revision_id", row.revision_id ? json(*row.revision_id) : json(nullptr)},
                      {"driver", row.driver}, {"pid", row.pid ? json(*row.pid) : json(nullptr)},
                      {"container_id", row.container_id ? json(*row.container_id) : json(nullptr)},
                      {"job_id", row.job_id ? json(*row.job_id) : json(nullptr)},
                      {"port", row.port ? json(*row.port) : json(nullptr)}, {"health", row.health}, {"started_at", row.started_at},
                      {"role", row.role}, {"recipe_id", nullptr}, {"tracked", false}};
            // While the ledger cannot be written, what the engine answers now, not what was last recorded.
            if (auto measured = api.reconciler.measured_health(row.id)) e["health"] = *measured, e["health_measured"] = true;
            // Untracked: recorded as running by an earlier run, and not adopted yet.
            for (const auto& l : live)
                if (l.row_id == row.id) e["recipe_id"] = l.handle.recipe.recipe_id, e["tracked"] = true;
            data.push_back(e);
        }
        send(res, 200, {{"data", data}});
    });
    routes.get(R"(/api/v1/engines/([0-9]{1,18})/log)", "/api/v1/engines/{id}/log", [api](const httplib::Request& req, httplib::Response& res, const std::string&) {
        const state::Id id = std::stoll(req.matches[1]);
        const auto lines = static_cast<std::size_t>(integer_param(req, "lines", 1, 5000).value_or(200));
        const auto text = api.reconciler.engine_log(id, lines);
        if (!text) throw ApiError{404, "not_found", "anvild runs no engine " + std::to_string(id) + " now (see GET /api/v1/engines)"};
        send(res, 200, {{"data", {{"id", id}, {"lines", lines}, {"text", http::valid_utf8(*text)}}}});
    });
}

}  // namespace anvil::daemon
