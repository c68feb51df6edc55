// The default and the operator's hold on it: GET and POST /api/v1/default (pin, release),
// POST /api/v1/promotion/freeze and unfreeze.
#include "daemon/anvild/api_routes.hpp"


namespace anvil::daemon {

using json = nlohmann::json;

void add_default_routes(ApiRoutes& routes, ApiContext& api) {
    routes.get("/api/v1/default", "/api/v1/default", [api](const httplib::Request&, httplib::Response& res, const std::string&) {
        const auto current = api.store.current_default();
        if (!current) return send(res, 200, {{"data", nullptr}});
        const auto pin = api.store.pin();
        std::string since, reason, actor;
        if (const auto detail = api.store.recipe(current->recipe_id))
            for (const auto& t : detail->history)
                if (t.revision_id == current->id && t.to == state::Status::promoted) {
                    since = t.created_at;
                    reason = t.reason;
                    actor = t.actor;
                }
        send(res, 200, {{"data", {{"slot", current->serving_slot}, {"recipe_id", current->recipe_id}, {"revision_id", current->id},
                                  {"since", since}, {"reason", reason}, {"actor", actor},
                                  {"pinned", pin && pin->recipe_id == current->recipe_id}}}});
    });
    routes.post("/api/v1/default", "/api/v1/default", [api](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
         const json body = body_of(req);
         if (!body.contains("recipe_id") || !(body["recipe_id"].is_string() || body["recipe_id"].is_null()))
             throw ApiError{400, "bad_request", "the body must be {\"recipe_id\": \"<id>\"} to pin, or {\"recipe_id\": null} to release the pin"};
         const std::optional<std::string> id = body["recipe_id"].is_null() ? std::nullopt : std::optional(body["recipe_id"].get<std::string>());
         api.reconciler.requests().pin(id, actor);
         send(res, 200, {{"data", {{"pinned", id ? json(*id) : json(nullptr)}}}});
    });
    routes.post("/api/v1/promotion/freeze", "/api/v1/promotion/freeze", [api](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
         const json body = body_of(req);
         if (body.contains("reason") && !body["reason"].is_string()) throw ApiError{400, "bad_request", "reason must be a string"};
         api.reconciler.requests().freeze(body.value("reason", std::string()), actor);
         send(res, 200, {{"data", {{"frozen", true}}}});
    });
    routes.post("/api/v1/promotion/unfreeze", "/api/v1/promotion/unfreeze", [api](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
         body_of(req);
         api.reconciler.requests().unfreeze(actor);
         send(res, 200, {{"data", {{"frozen", false}}}});
    });
}

}  // namespace anvil::daemon
