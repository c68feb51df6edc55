// The controller's picture: GET /api/v1/status, inventory, registry, decisions and the event feed;
// POST /api/v1/registry/sync.
#include "daemon/anvild/api_routes.hpp"

#include <algorithm>

#include "daemon/anvild/api_views.hpp"
#include "daemon/host/inventory_report.hpp"
#include "engine/http/safe_text.hpp"
#include "kernels/hardware/nvml_inventory.hpp"

namespace anvil::daemon {

using json = nlohmann::json;

namespace {

json feed_json(const std::vector<state::FeedItem>& items) {
    json out = json::array();
    for (const auto& item : items)
        out.push_back({{"cursor", item.cursor.str()}, {"kind", item.kind}, {"subject", item.subject}, {"message", item.message},
                       {"data", item.data}, {"created_at", item.created_at}});
    return out;
}

}  // namespace

void add_status_routes(ApiRoutes& routes, ApiContext& api) {
    routes.get("/api/v1/status", "/api/v1/status", [api](const httplib::Request&, httplib::Response& res, const std::string&) { send(res, 200, status_view(api.reconciler, api.store)); });

    // What NVML reads now, and what feasibility judges with (declared, measured at start, or none);
    // with a Slurm placement also the cluster's nodes as slurmrestd lists them now.
    routes.get("/api/v1/inventory", "/api/v1/inventory", [api](const httplib::Request&, httplib::Response& res, const std::string&) {
        json data{{"measured_now", host::inventory_to_json(hardware::read_inventory())}, {"judging_with", inventory_view(api.reconciler)}};
        if (api.config.slurm) data["cluster"] = cluster_view(*api.config.slurm);
        send(res, 200, {{"data", std::move(data)}});
    });

    routes.get("/api/v1/decisions", "/api/v1/decisions", [api](const httplib::Request&, httplib::Response& res, const std::string&) {
        send(res, 200, {{"data", decisions_view(api.reconciler.promotion_picture(), api.store)}});
    });
    routes.get("/api/v1/registry", "/api/v1/registry", [api](const httplib::Request&, httplib::Response& res, const std::string&) { send(res, 200, {{"data", registry_view(api.reconciler)}}); });
    routes.get("/api/v1/events", "/api/v1/events", [api](const httplib::Request& req, httplib::Response& res, const std::string&) {
        state::FeedCursor cursor;
        const int limit = static_cast<int>(integer_param(req, "limit", 1, 1000).value_or(100));
        // last=N: the newest N items (ids are dense: the ledger only appends), then follow meta.next.
        if (const auto last = integer_param(req, "last", 1, 500)) {
            if (req.has_param("after")) throw ApiError{400, "bad_request", "give either after or last, not both"};
            const auto head = api.store.feed_head();
            auto items = api.store.feed_since({std::max<state::Id>(0, head.transition - *last), std::max<state::Id>(0, head.event - *last)},
                                           static_cast<int>(2 * *last));
            if (items.size() > static_cast<std::size_t>(*last)) items.erase(items.begin(), items.end() - *last);
            return send(res, 200, {{"data", feed_json(items)}, {"meta", {{"next", (items.empty() ? head : items.back().cursor).str()}}}});
        }
        if (req.has_param("after")) {
            auto parsed = state::FeedCursor::parse(req.get_param_value("after"));
            if (!parsed) throw ApiError{400, "bad_request", "after must be a cursor like 12.40 from an earlier answer"};
            cursor = *parsed;
        }
        const auto items = api.store.feed_since(cursor, limit);
        send(res, 200, {{"data", feed_json(items)}, {"meta", {{"next", (items.empty() ? cursor : items.back().cursor).str()}}}});
    });

    routes.post("/api/v1/registry/sync", "/api/v1/registry/sync", [api](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
         body_of(req);
         api.store.append_event("api", "registry", actor + " asked for a registry sync", {{"actor", actor}});
         api.reconciler.requests().request_sync();
         send(res, 202, {{"data", {{"queued", true}}}});
    });
}

}  // namespace anvil::daemon
