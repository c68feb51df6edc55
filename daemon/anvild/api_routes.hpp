// What every API handler file shares: the context it reads and writes through, the route table it
// adds to, and the JSON answers and errors (docs/API.md). Each resource's routes live in their own
// file (api_*_routes.cpp); ApiServer adds them all.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "daemon/anvild/response_cache.hpp"
#include "daemon/config/config.hpp"
#include "daemon/controller/daemon_metrics.hpp"
#include "daemon/controller/reconciler.hpp"
#include "state/store.hpp"

namespace anvil::http {
class GuardedServer;
}

namespace anvil::daemon {

// A request the API refuses itself: answered as {error: {code, message}} with `status`.
struct ApiError {
    int status;
    std::string code;
    std::string message;
};

// What the handlers act on.
struct ApiContext {
    const DaemonConfig& config;
    state::Store& store;
    Reconciler& reconciler;
    DaemonMetrics& metrics;
    ResponseCache& recipe_pages;  // GET /api/v1/recipes pages while the ledger has not changed since
};

// The route table (used while the routes are added; what a handler needs is captured by value):
// each route answers errors as JSON (ApiError, the controller's refusals as 404
// and 409, the ledger unavailable as 503, anything else as 500 with the detail in the log), counts
// its answers under `name` for /metrics, and a write gets the actor the ledger records.
class ApiRoutes {
public:
    using Handler = std::function<void(const httplib::Request&, httplib::Response&, const std::string& actor)>;
    ApiRoutes(http::GuardedServer& server, DaemonMetrics& metrics, std::string actor)
        : server_(server), metrics_(metrics), actor_(std::move(actor)) {}
    void get(const std::string& pattern, const std::string& name, Handler handler);
    // A write: admission has refused it without the bearer token before its body was read.
    void post(const std::string& pattern, const std::string& name, Handler handler);

private:
    httplib::Server::Handler wrap(const std::string& name, bool write, Handler handler) const;

    http::GuardedServer& server_;
    DaemonMetrics& metrics_;
    std::string actor_;
};

// Each resource's routes.
void add_health_routes(ApiRoutes& routes, ApiContext& api);   // /healthz, /readyz, /metrics
void add_status_routes(ApiRoutes& routes, ApiContext& api);   // status, inventory, registry, decisions, events, sync
void add_recipe_routes(ApiRoutes& routes, ApiContext& api);   // recipes, one recipe and its parts, qualify
void add_default_routes(ApiRoutes& routes, ApiContext& api);  // the default, pin, freeze, unfreeze
void add_engine_routes(ApiRoutes& routes, ApiContext& api);   // engines and their logs
void add_console_routes(ApiRoutes& routes);                   // the web console's files

// ---- answers ----
void send(httplib::Response& res, int status, const nlohmann::json& body);
std::string error_code(int status);  // the code an HTTP status gets by default ("not_found" …)
std::string error_json(const std::string& code, const std::string& message);
void send_error(httplib::Response& res, int status, const std::string& code, const std::string& message);
// An integer query parameter within [lo, hi], or nothing when absent; anything else is a 400.
std::optional<std::int64_t> integer_param(const httplib::Request& req, const char* name, std::int64_t lo, std::int64_t hi);
// A JSON object body, or an empty object when there is none; anything else is a 400.
nlohmann::json body_of(const httplib::Request& req);
// The ledger's rows as the API shows them.
nlohmann::json transition_json(const state::TransitionRow& t);
nlohmann::json verdict_json(const state::VerdictRow& v);

}  // namespace anvil::daemon
