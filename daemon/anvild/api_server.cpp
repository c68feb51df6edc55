#include "daemon/anvild/api_server.hpp"

#include <spdlog/spdlog.h>

#include "daemon/anvild/api_routes.hpp"
#include "engine/http/guarded_server.hpp"
#include "engine/http/safe_text.hpp"
#include "support/digest.hpp"

namespace anvil::daemon {

namespace {

http::ServerLimits limits_of(const DaemonConfig& config) {
    http::ServerLimits limits;
    limits.max_body_bytes = config.max_request_body_bytes;
    return limits;
}

}  // namespace

std::string token_id(const std::string& token) { return support::sha256_hex(token).substr(0, 8); }

ApiServer::ApiServer(const DaemonConfig& config, state::Store& store, Reconciler& reconciler, DaemonMetrics& metrics, std::string token)
    : config_(config), store_(store), reconciler_(reconciler), metrics_(metrics), token_(std::move(token)), actor_("api:" + token_id(token_)),
      http_(std::make_unique<http::GuardedServer>(limits_of(config), [](int status, const std::string& message) {
          return error_json(error_code(status), message);
      })) {
    // Small JSON answers must not wait for the client's delayed ACK (Nagle: 40 ms per request).
    http_->set_tcp_nodelay(true);
    // Only this server's own names, and same-origin pages (the console) or configured origins.
    http_->set_origin_policy({config.allowed_hosts, config.allowed_origins});
    // Every write needs the token, checked before a byte of its body is read.
    http_->set_admission([this](const httplib::Request& req) -> std::optional<http::Refusal> {
        if (req.method == "GET" || req.method == "HEAD" || http::has_bearer_token(req, token_)) return std::nullopt;
        return http::Refusal{401, "this write needs 'Authorization: Bearer <token>' with the token in " + token_path(config_).string()};
    });
    routes();
}

ApiServer::~ApiServer() { stop(); }

void ApiServer::start() {
    const auto& l = config_.listen;
    port_ = l.port == 0 ? http_->bind_to_any_port(l.host) : (http_->bind_to_port(l.host, l.port) ? l.port : -1);
    if (port_ <= 0) throw std::runtime_error("cannot listen on " + l.str() + " for the API: address in use or not permitted (--listen HOST:PORT)");
    thread_ = std::thread([this] { http_->listen_after_bind(); });
    spdlog::info("API listening on {}:{}", l.host, port_);
}

void ApiServer::stop() {
    if (!thread_.joinable()) return;
    http_->stop();
    thread_.join();
}

void ApiServer::routes() {
    ApiRoutes routes(*http_, metrics_, actor_);
    ApiContext api{config_, store_, reconciler_, metrics_, recipe_pages_};
    add_health_routes(routes, api);
    add_status_routes(routes, api);
    add_recipe_routes(routes, api);
    add_default_routes(routes, api);
    add_engine_routes(routes, api);
    add_console_routes(routes);

    // Anything else: a JSON 404 (or 405 for a known path with the wrong method, which httplib reports as 404 too).
    // Other errors (a request that is not HTTP, too large, too slow) get the gate's JSON message.
    http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (res.status == 404 && res.body.empty()) {
            send_error(res, 404, "not_found", "no route " + http::valid_utf8(req.method + " " + req.path) + " (see docs/API.md)");
            metrics_.record_request("unknown", res.status);
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
}

}  // namespace anvil::daemon
