// GET /api/v1/recipes (filtered, sorted, paged, cached while the ledger has not changed), one recipe
// and its feasibility, receipts and history; POST /api/v1/recipes/{id}/qualify.
#include "daemon/anvild/api_routes.hpp"

#include <cctype>

#include "daemon/anvild/api_views.hpp"
#include "engine/http/safe_text.hpp"

namespace anvil::daemon {

using json = nlohmann::json;

namespace {

json number_json(const std::optional<registry::Number>& n) { return n ? registry::to_json(*n) : json(nullptr); }

std::string escape_query(const std::string& s) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
        else out += {'%', hex[c >> 4], hex[c & 15]};
    }
    return out;
}

json revision_json(const state::RevisionRow& r) {
    return {{"revision_id", r.id},    {"sha256", r.sha256},   {"source", r.source_url},       {"commit", r.commit_id},
            {"path", r.path},         {"blob", r.blob_id},    {"pinned", r.pinned},           {"unpinned_reasons", r.unpinned_reasons},
            {"engine", r.engine},     {"hardware_id", r.hardware_id}, {"launch_kind", r.launch_kind}, {"serving_slot", r.serving_slot},
            {"status", std::string(state::to_string(r.status))}, {"created_at", r.created_at}};
}

json evidence_json(const state::EvidenceRow& e) {
    return {{"id", e.id},
            {"revision_id", e.revision_id},
            {"metric", e.metric},
            {"min", number_json(e.min)},
            {"max", number_json(e.max)},
            {"unit", e.unit},
            {"status", std::string(registry::to_string(e.status))},
            {"class", std::string(state::to_string(e.evidence_class))},
            {"source", e.source},
            {"observed_at", e.observed_at},
            {"receipt_sha256", e.receipt_sha256 ? json(*e.receipt_sha256) : json(nullptr)},
            {"receipt_path", e.receipt_path ? json(*e.receipt_path) : json(nullptr)},
            {"control_revision_id", e.control_revision_id ? json(*e.control_revision_id) : json(nullptr)}};
}

}  // namespace

void add_recipe_routes(ApiRoutes& routes, ApiContext& api) {
    routes.get("/api/v1/recipes", "/api/v1/recipes", [api](const httplib::Request& req, httplib::Response& res, const std::string&) {
        state::RecipeFilter f;
        auto text = [&](const char* name) -> std::optional<std::string> {
            if (!req.has_param(name)) return std::nullopt;
            return req.get_param_value(name);
        };
        f.status = text("status");
        if (f.status && !state::parse_status(*f.status))
            throw ApiError{400, "bad_request", "status must be one of candidate, qualifying, validated, promoted, retired, rejected, failed"};
        f.engine = text("engine");
        f.hardware = text("hardware");
        f.verdict = text("verdict");
        f.text = text("q");
        if (auto p = text("pinned")) {
            if (*p != "true" && *p != "false") throw ApiError{400, "bad_request", "pinned must be true or false"};
            f.pinned = *p == "true";
        }
        if (auto sort = text("sort")) {
            // "status" ascending, "-status" descending; ties by id.
            const bool descending = !sort->empty() && sort->front() == '-';
            const auto order = state::parse_recipe_order(descending ? sort->substr(1) : *sort);
            if (!order) throw ApiError{400, "bad_request", "sort must be one of id, status, engine, hardware, verdict, each with an optional leading '-' for descending, not '" + http::valid_utf8(*sort) + "'"};
            f.order = *order;
            f.descending = descending;
        }
        f.limit = integer_param(req, "limit", 1, 500).value_or(50);
        f.offset = integer_param(req, "offset", 0, std::int64_t{1} << 40).value_or(0);
        // The page is a function of these parameters and the ledger alone.
        std::string key = std::to_string(f.limit) + "," + std::to_string(f.offset);
        for (const char* name : {"status", "engine", "hardware", "verdict", "q", "pinned", "sort"}) {
            key += '\0';
            if (req.has_param(name)) key += "=" + req.get_param_value(name);
        }
        const auto generation = api.store.write_generation();
        if (auto body = api.recipe_pages.find(key, generation)) {
            res.status = 200;
            res.set_content(*body, "application/json");
            return;
        }
        const auto page = api.store.list_recipes(f);
        json data = json::array();
        for (const auto& r : page.items)
            data.push_back({{"id", r.id}, {"revision_id", r.revision_id}, {"status", r.status}, {"engine", r.engine},
                            {"hardware_id", r.hardware_id}, {"pinned", r.pinned}, {"verdict", r.verdict ? json(*r.verdict) : json(nullptr)}});
        auto link = [&](std::int64_t offset) {
            std::string q = "/api/v1/recipes?limit=" + std::to_string(f.limit) + "&offset=" + std::to_string(offset);
            for (const char* name : {"status", "engine", "hardware", "verdict", "q", "pinned", "sort"})
                if (req.has_param(name)) q += std::string("&") + name + "=" + escape_query(req.get_param_value(name));
            return q;
        };
        const bool more = f.offset + static_cast<std::int64_t>(page.items.size()) < page.total;
        std::string body = http::dump_json({{"data", data},
                                            {"meta", {{"total", page.total}, {"limit", f.limit}, {"offset", f.offset}}},
                                            {"links", {{"self", link(f.offset)}, {"next", more ? json(link(f.offset + f.limit)) : json(nullptr)}}}});
        res.status = 200;
        res.set_content(body, "application/json");
        if (api.store.write_generation() == generation) api.recipe_pages.store(key, generation, std::move(body));
    });

    routes.get(R"(/api/v1/recipes/([^/]+)/feasibility)", "/api/v1/recipes/{id}/feasibility", [api](const httplib::Request& req, httplib::Response& res, const std::string&) {
        const std::string id = req.matches[1];
        if (auto f = api.reconciler.feasibility_of(id)) return send(res, 200, {{"data", *f}});
        // Gone from the registry: the verdict recorded when it was judged.
        const auto detail = api.store.recipe(id);
        if (!detail) throw ApiError{404, "not_found", "no recipe " + id};
        json data = nullptr;
        for (const auto& v : detail->verdicts)
            if (v.gate == "feasibility" && v.revision_id == detail->revisions.front().id) data = verdict_json(v);
        send(res, 200, {{"data", data}});
    });
    routes.get(R"(/api/v1/recipes/([^/]+)/receipts)", "/api/v1/recipes/{id}/receipts", [api](const httplib::Request& req, httplib::Response& res, const std::string&) {
        const auto detail = api.store.recipe(req.matches[1]);
        if (!detail) throw ApiError{404, "not_found", "no recipe " + http::valid_utf8(std::string(req.matches[1]))};
        send(res, 200, {{"data", receipts_view(*detail, api.store, promotion_thresholds(api.config))}});
    });
    routes.get(R"(/api/v1/recipes/([^/]+)/history)", "/api/v1/recipes/{id}/history", [api](const httplib::Request& req, httplib::Response& res, const std::string&) {
        const auto detail = api.store.recipe(req.matches[1]);
        if (!detail) throw ApiError{404, "not_found", "no recipe " + std::string(req.matches[1])};
        json data = json::array();
        for (const auto& t : detail->history) data.push_back(transition_json(t));
        send(res, 200, {{"data", data}});
    });
    routes.get(R"(/api/v1/recipes/([^/]+))", "/api/v1/recipes/{id}", [api](const httplib::Request& req, httplib::Response& res, const std::string&) {
        const std::string id = req.matches[1];
        const auto detail = api.store.recipe(id);
        if (!detail) throw ApiError{404, "not_found", "no recipe " + id};
        json data = {{"id", id}, {"status", std::string(state::to_string(detail->revisions.front().status))}};
        data["revisions"] = json::array();
        for (const auto& r : detail->revisions) data["revisions"].push_back(revision_json(r));
        data["document"] = detail->revisions.front().document;
        data["feasibility"] = api.reconciler.feasibility_of(id).value_or(json(nullptr));
        data["evidence"] = json::array();
        for (const auto& e : detail->evidence) data["evidence"].push_back(evidence_json(e));
        data["verdicts"] = json::array();
        for (const auto& v : detail->verdicts) data["verdicts"].push_back(verdict_json(v));
        data["history"] = json::array();
        for (const auto& t : detail->history) data["history"].push_back(transition_json(t));
        send(res, 200, {{"data", data}});
    });

    routes.post(R"(/api/v1/recipes/([^/]+)/qualify)", "/api/v1/recipes/{id}/qualify", [api](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
         body_of(req);
         api.reconciler.requests().request_qualification(req.matches[1], actor);
         send(res, 202, {{"data", {{"queued", true}, {"recipe_id", std::string(req.matches[1])}}}});
    });
}

}  // namespace anvil::daemon
