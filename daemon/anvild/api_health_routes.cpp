// /healthz, /readyz and /metrics: whether anvild lives, whether it is ready, and its counters with
// two gauges read directly (recipes by status in one query, engines running).
#include "daemon/anvild/api_routes.hpp"


namespace anvil::daemon {

using json = nlohmann::json;

void add_health_routes(ApiRoutes& routes, ApiContext& api) {
    routes.get("/healthz", "/healthz", [](const httplib::Request&, httplib::Response& res, const std::string&) { send(res, 200, {{"status", "ok"}}); });
    routes.get("/readyz", "/readyz", [api](const httplib::Request&, httplib::Response& res, const std::string&) {
        const auto waiting = api.reconciler.not_ready_reasons();
        if (waiting.empty()) send(res, 200, {{"status", "ready"}});
        else send(res, 503, {{"status", "not-ready"}, {"waiting_for", waiting}});
    });
    routes.get("/metrics", "/metrics", [api](const httplib::Request&, httplib::Response& res, const std::string&) {
        std::string gauges = "# HELP anvil_recipes Recipes by the status of their newest revision.\n# TYPE anvil_recipes gauge\n";
        for (const auto& [status, n] : api.store.recipes_by_status())
            gauges += "anvil_recipes{status=\"" + std::string(state::to_string(status)) + "\"} " + std::to_string(n) + "\n";
        gauges += "# HELP anvil_engines Engines anvild runs now.\n# TYPE anvil_engines gauge\nanvil_engines " +
                  std::to_string(api.reconciler.engines().size()) + "\n";
        res.set_content(api.metrics.render(gauges), "text/plain; version=0.0.4");
    });
}

}  // namespace anvil::daemon
