#include "daemon/anvild/api_routes.hpp"

#include <charconv>

#include <spdlog/spdlog.h>

#include "engine/http/guarded_server.hpp"
#include "engine/http/safe_text.hpp"

namespace anvil::daemon {

using json = nlohmann::json;

void send(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(http::dump_json(body), "application/json");
}

std::string error_code(int status) {
    switch (status) {
        case 400: return "bad_request";
        case 401: return "unauthorized";
        case 403: return "forbidden";
        case 404: return "not_found";
        case 405: return "method_not_allowed";
        case 408: return "request_timeout";
        case 409: return "conflict";
        case 413: return "payload_too_large";
        case 414: return "uri_too_long";
        case 431: return "headers_too_large";
        case 503: return "unavailable";
        default: return status >= 500 ? "internal" : "error";
    }
}

std::string error_json(const std::string& code, const std::string& message) {
    return http::dump_json({{"error", {{"code", code}, {"message", message}}}});
}

void send_error(httplib::Response& res, int status, const std::string& code, const std::string& message) {
    res.status = status;
    res.set_content(error_json(code, message), "application/json");
}

std::optional<std::int64_t> integer_param(const httplib::Request& req, const char* name, std::int64_t lo, std::int64_t hi) {
    if (!req.has_param(name)) return std::nullopt;
    const std::string v = req.get_param_value(name);
    std::int64_t out = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || end != v.data() + v.size() || out < lo || out > hi)
        throw ApiError{400, "bad_request", std::string("query parameter ") + name + " must be an integer from " + std::to_string(lo) + " to " +
                                               std::to_string(hi) + ", not '" + v + "'"};
    return out;
}

json verdict_json(const state::VerdictRow& v) {
    return {{"id", v.id},
            {"revision_id", v.revision_id},
            {"gate", v.gate},
            {"result", std::string(state::to_string(v.result))},
            {"class", v.verdict_class ? json(*v.verdict_class) : json(nullptr)},
            {"reasons", v.reasons},
            {"evidence_ids", v.evidence_ids},
            {"created_at", v.created_at}};
}

json transition_json(const state::TransitionRow& t) {
    return {{"id", t.id},
            {"revision_id", t.revision_id},
            {"from", t.from ? json(std::string(state::to_string(*t.from))) : json(nullptr)},
            {"to", std::string(state::to_string(t.to))},
            {"reason", t.reason},
            {"actor", t.actor},
            {"evidence_ids", t.evidence_ids},
            {"verdict_ids", t.verdict_ids},
            {"commit", t.commit_id ? json(*t.commit_id) : json(nullptr)},
            {"created_at", t.created_at}};
}

// A JSON body, or an empty object when there is none; anything else that does not parse is a 400.
json body_of(const httplib::Request& req) {
    if (req.body.empty()) return json::object();
    http::ParsedBody parsed = http::parse_json_body(req.body);
    if (!parsed.ok()) throw ApiError{400, "invalid_json", "the request body is not valid JSON: " + parsed.error};
    json body = std::move(parsed.value);
    if (!body.is_object()) throw ApiError{400, "bad_request", "the request body must be a JSON object"};
    return body;
}

httplib::Server::Handler ApiRoutes::wrap(const std::string& name, bool write, Handler handler) const {
    // Captures what it needs by value: the table is gone once the routes are added.
    return [metrics = &metrics_, name, actor = write ? actor_ : std::string(), handler = std::move(handler)](const httplib::Request& req,
                                                                                                           httplib::Response& res) {
        try {
            handler(req, res, actor);
        } catch (const ApiError& e) {
            send_error(res, e.status, e.code, e.message);
        } catch (const RequestRefused& e) {
            const int status = e.why == RequestRefused::Why::not_found ? 404 : 409;
            send_error(res, status, error_code(status), e.what());
        } catch (const state::StoreError& e) {
            send_error(res, 503, "unavailable", e.what());
        } catch (const std::exception& e) {
            spdlog::error("{} {}: {}", http::valid_utf8(req.method), http::valid_utf8(req.path), http::valid_utf8(e.what()));
            send_error(res, 500, "internal", "internal error; anvild's log has the details");
        }
        metrics->record_request(name, res.status);
    };
}

void ApiRoutes::get(const std::string& pattern, const std::string& name, Handler handler) {
    server_.Get(pattern, wrap(name, false, std::move(handler)));
}

void ApiRoutes::post(const std::string& pattern, const std::string& name, Handler handler) {
    server_.Post(pattern, wrap(name, true, std::move(handler)));
}

}  // namespace anvil::daemon
