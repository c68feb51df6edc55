#include "daemon/anvild/api_server.hpp"

#include "daemon/anvild/api_views.hpp"
#include "daemon/anvild/console_assets.hpp"
#include "support/digest.hpp"

#include "engine/http/guarded_server.hpp"
#include "engine/http/safe_text.hpp"
#include "daemon/host/inventory_report.hpp"


#include <charconv>

#include <httplib.h>
#include <spdlog/spdlog.h>

namespace anvil::daemon {

namespace {

using json = nlohmann::json;

struct ApiError {
    int status;
    std::string code;
    std::string message;
};

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

http::ServerLimits limits_of(const DaemonConfig& config) {
    http::ServerLimits limits;
    limits.max_body_bytes = config.max_request_body_bytes;
    return limits;
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

json number_json(const std::optional<registry::Number>& n) { return n ? registry::to_json(*n) : json(nullptr); }

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

json feed_json(const std::vector<state::FeedItem>& items) {
    json out = json::array();
    for (const auto& item : items)
        out.push_back({{"cursor", item.cursor.str()}, {"kind", item.kind}, {"subject", item.subject}, {"message", item.message},
                       {"data", item.data}, {"created_at", item.created_at}});
    return out;
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
    using Handler = std::function<void(const httplib::Request&, httplib::Response&, const std::string& actor)>;
    // Every route: JSON errors, the metrics counter, and for writes the bearer token.
    auto wrap = [this](std::string route, bool write, Handler handler) {
        return [this, route, write, handler](const httplib::Request& req, httplib::Response& res) {
            std::string actor;
            try {
                // Admission has refused every write without the token before its body was read.
                if (write) actor = actor_;
                handler(req, res, actor);
            } catch (const ApiError& e) {
                send_error(res, e.status, e.code, e.message);
            } catch (const RequestRefused& e) {
                send_error(res, e.status, e.code, e.what());
            } catch (const state::StoreError& e) {
                send_error(res, 503, "unavailable", e.what());
            } catch (const std::exception& e) {
                spdlog::error("{} {}: {}", http::valid_utf8(req.method), http::valid_utf8(req.path), http::valid_utf8(e.what()));
                send_error(res, 500, "internal", "internal error; anvild's log has the details");
            }
            metrics_.record_request(route, res.status);
        };
    };
    auto& h = *http_;

    h.Get("/healthz", wrap("/healthz", false, [](const httplib::Request&, httplib::Response& res, const std::string&) { send(res, 200, {{"status", "ok"}}); }));
    h.Get("/readyz", wrap("/readyz", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) {
              const auto waiting = reconciler_.not_ready_reasons();
              if (waiting.empty()) send(res, 200, {{"status", "ready"}});
              else send(res, 503, {{"status", "not-ready"}, {"waiting_for", waiting}});
          }));
    h.Get("/metrics", wrap("/metrics", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) {
              std::string gauges = "# HELP anvil_recipes Recipes by the status of their newest revision.\n# TYPE anvil_recipes gauge\n";
              const json counts = status_view(reconciler_, store_)["recipes"];
              for (const auto& [status, n] : counts.items()) gauges += "anvil_recipes{status=\"" + status + "\"} " + std::to_string(n.get<std::int64_t>()) + "\n";
              gauges += "# HELP anvil_engines Engines anvild runs now.\n# TYPE anvil_engines gauge\nanvil_engines " +
                        std::to_string(reconciler_.engines().size()) + "\n";
              res.set_content(metrics_.render(gauges), "text/plain; version=0.0.4");
          }));

    h.Get("/api/v1/status", wrap("/api/v1/status", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) { send(res, 200, status_view(reconciler_, store_)); }));

    // What NVML reads now, and what feasibility judges with (declared, measured at start, or none);
    // with a Slurm placement also the cluster's nodes as slurmrestd lists them now.
    h.Get("/api/v1/inventory", wrap("/api/v1/inventory", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) {
              json data{{"measured_now", host::inventory_to_json(hardware::read_inventory())}, {"judging_with", inventory_view(reconciler_)}};
              if (config_.slurm) data["cluster"] = cluster_view(*config_.slurm);
              send(res, 200, {{"data", std::move(data)}});
          }));

    h.Get("/api/v1/recipes", wrap("/api/v1/recipes", false, [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
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
              const auto generation = store_.write_generation();
              if (auto body = recipe_pages_.find(key, generation)) {
                  res.status = 200;
                  res.set_content(*body, "application/json");
                  return;
              }
              const auto page = store_.list_recipes(f);
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
              if (store_.write_generation() == generation) recipe_pages_.store(key, generation, std::move(body));
          }));

    h.Get(R"(/api/v1/recipes/([^/]+)/feasibility)", wrap("/api/v1/recipes/{id}/feasibility", false, [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
              const std::string id = req.matches[1];
              if (auto f = reconciler_.feasibility_of(id)) return send(res, 200, {{"data", *f}});
              // Gone from the registry: the verdict recorded when it was judged.
              const auto detail = store_.recipe(id);
              if (!detail) throw ApiError{404, "not_found", "no recipe " + id};
              json data = nullptr;
              for (const auto& v : detail->verdicts)
                  if (v.gate == "feasibility" && v.revision_id == detail->revisions.front().id) data = verdict_json(v);
              send(res, 200, {{"data", data}});
          }));
    h.Get(R"(/api/v1/recipes/([^/]+)/receipts)", wrap("/api/v1/recipes/{id}/receipts", false, [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
              const auto detail = store_.recipe(req.matches[1]);
              if (!detail) throw ApiError{404, "not_found", "no recipe " + http::valid_utf8(std::string(req.matches[1]))};
              send(res, 200, {{"data", receipts_view(*detail, store_, promotion_thresholds(config_))}});
          }));
    h.Get(R"(/api/v1/recipes/([^/]+)/history)", wrap("/api/v1/recipes/{id}/history", false, [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
              const auto detail = store_.recipe(req.matches[1]);
              if (!detail) throw ApiError{404, "not_found", "no recipe " + std::string(req.matches[1])};
              json data = json::array();
              for (const auto& t : detail->history) data.push_back(transition_json(t));
              send(res, 200, {{"data", data}});
          }));
    h.Get(R"(/api/v1/recipes/([^/]+))", wrap("/api/v1/recipes/{id}", false, [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
              const std::string id = req.matches[1];
              const auto detail = store_.recipe(id);
              if (!detail) throw ApiError{404, "not_found", "no recipe " + id};
              json data = {{"id", id}, {"status", std::string(state::to_string(detail->revisions.front().status))}};
              data["revisions"] = json::array();
              for (const auto& r : detail->revisions) data["revisions"].push_back(revision_json(r));
              data["document"] = detail->revisions.front().document;
              data["feasibility"] = reconciler_.feasibility_of(id).value_or(json(nullptr));
              data["evidence"] = json::array();
              for (const auto& e : detail->evidence) data["evidence"].push_back(evidence_json(e));
              data["verdicts"] = json::array();
              for (const auto& v : detail->verdicts) data["verdicts"].push_back(verdict_json(v));
              data["history"] = json::array();
              for (const auto& t : detail->history) data["history"].push_back(transition_json(t));
              send(res, 200, {{"data", data}});
          }));

    h.Get("/api/v1/default", wrap("/api/v1/default", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) {
              const auto current = store_.current_default();
              if (!current) return send(res, 200, {{"data", nullptr}});
              const auto pin = store_.pin();
              std::string since, reason, actor;
              if (const auto detail = store_.recipe(current->recipe_id))
                  for (const auto& t : detail->history)
                      if (t.revision_id == current->id && t.to == state::Status::promoted) {
                          since = t.created_at;
                          reason = t.reason;
                          actor = t.actor;
                      }
              send(res, 200, {{"data", {{"slot", current->serving_slot}, {"recipe_id", current->recipe_id}, {"revision_id", current->id},
                                        {"since", since}, {"reason", reason}, {"actor", actor},
                                        {"pinned", pin && pin->recipe_id == current->recipe_id}}}});
          }));
    h.Get("/api/v1/engines", wrap("/api/v1/engines", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) {
              json data = json::array();
              const auto live = reconciler_.engines();
              for (const auto& row : store_.running_engines()) {
                  json e = {{"id", row.id}, {"engine_id", row.engine_key}, {"revision_id", row.revision_id ? json(*row.revision_id) : json(nullptr)},
                            {"driver", row.driver}, {"pid", row.pid ? json(*row.pid) : json(nullptr)},
                            {"container_id", row.container_id ? json(*row.container_id) : json(nullptr)},
                            {"job_id", row.job_id ? json(*row.job_id) : json(nullptr)},
                            {"port", row.port ? json(*row.port) : json(nullptr)}, {"health", row.health}, {"started_at", row.started_at},
                            {"role", row.role}, {"recipe_id", nullptr}, {"tracked", false}};
                  // While the ledger cannot be written, what the engine answers now, not what was last recorded.
                  if (auto measured = reconciler_.measured_health(row.id)) e["health"] = *measured, e["health_measured"] = true;
                  // Untracked: recorded as running by an earlier run, and not adopted yet.
                  for (const auto& l : live)
                      if (l.row_id == row.id) e["recipe_id"] = l.handle.recipe.recipe_id, e["tracked"] = true;
                  data.push_back(e);
              }
              send(res, 200, {{"data", data}});
          }));
    h.Get(R"(/api/v1/engines/([0-9]{1,18})/log)", wrap("/api/v1/engines/{id}/log", false, [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
              const state::Id id = std::stoll(req.matches[1]);
              const auto lines = static_cast<std::size_t>(integer_param(req, "lines", 1, 5000).value_or(200));
              const auto text = reconciler_.engine_log(id, lines);
              if (!text) throw ApiError{404, "not_found", "anvild runs no engine " + std::to_string(id) + " now (see GET /api/v1/engines)"};
              send(res, 200, {{"data", {{"id", id}, {"lines", lines}, {"text", http::valid_utf8(*text)}}}});
          }));
    h.Get("/api/v1/decisions", wrap("/api/v1/decisions", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) {
              send(res, 200, {{"data", decisions_view(reconciler_.promotion_picture(), store_)}});
          }));
    h.Get("/api/v1/registry", wrap("/api/v1/registry", false, [this](const httplib::Request&, httplib::Response& res, const std::string&) { send(res, 200, {{"data", registry_view(reconciler_)}}); }));
    h.Get("/api/v1/events", wrap("/api/v1/events", false, [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
              state::FeedCursor cursor;
              const int limit = static_cast<int>(integer_param(req, "limit", 1, 1000).value_or(100));
              // last=N: the newest N items (ids are dense: the ledger only appends), then follow meta.next.
              if (const auto last = integer_param(req, "last", 1, 500)) {
                  if (req.has_param("after")) throw ApiError{400, "bad_request", "give either after or last, not both"};
                  const auto head = store_.feed_head();
                  auto items = store_.feed_since({std::max<state::Id>(0, head.transition - *last), std::max<state::Id>(0, head.event - *last)},
                                                 static_cast<int>(2 * *last));
                  if (items.size() > static_cast<std::size_t>(*last)) items.erase(items.begin(), items.end() - *last);
                  return send(res, 200, {{"data", feed_json(items)}, {"meta", {{"next", (items.empty() ? head : items.back().cursor).str()}}}});
              }
              if (req.has_param("after")) {
                  auto parsed = state::FeedCursor::parse(req.get_param_value("after"));
                  if (!parsed) throw ApiError{400, "bad_request", "after must be a cursor like 12.40 from an earlier answer"};
                  cursor = *parsed;
              }
              const auto items = store_.feed_since(cursor, limit);
              send(res, 200, {{"data", feed_json(items)}, {"meta", {{"next", (items.empty() ? cursor : items.back().cursor).str()}}}});
          }));

    // ---- the web console: files built into the binary, reading only the API above ----
    auto serve_file = [](const httplib::Request& req, httplib::Response& res, const console::EmbeddedFile& f) {
        // Scripts and styles only from this origin, no inline script, no framing: a page that
        // holds a bearer token in its session gives nothing else a way in.
        res.set_header("Content-Security-Policy",
                       "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
        res.set_header("X-Content-Type-Options", "nosniff");
        res.set_header("Referrer-Policy", "no-referrer");
        res.set_header("Cache-Control", "no-cache");
        res.set_header("ETag", std::string(f.etag));
        if (req.get_header_value("If-None-Match") == f.etag) {
            res.status = 304;
            return;
        }
        res.status = 200;
        res.set_content(std::string(f.bytes), std::string(f.content_type));
    };
    h.Get("/", wrap("/", false, [serve_file](const httplib::Request& req, httplib::Response& res, const std::string&) {
              const auto* f = console::find("/console/index.html");
              if (!f) throw ApiError{404, "not_found", "this anvild was built without its console"};
              serve_file(req, res, *f);
          }));
    h.Get(R"(/console/.*)", wrap("/console/{file}", false, [serve_file](const httplib::Request& req, httplib::Response& res, const std::string&) {
              const auto* f = console::find(req.path);
              if (!f) throw ApiError{404, "not_found", "the console has no file " + http::valid_utf8(req.path)};
              serve_file(req, res, *f);
          }));

    // ---- writes ----
    h.Post("/api/v1/registry/sync", wrap("/api/v1/registry/sync", true, [this](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
               body_of(req);
               store_.append_event("api", "registry", actor + " asked for a registry sync", {{"actor", actor}});
               reconciler_.request_sync();
               send(res, 202, {{"data", {{"queued", true}}}});
           }));
    h.Post(R"(/api/v1/recipes/([^/]+)/qualify)", wrap("/api/v1/recipes/{id}/qualify", true, [this](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
               body_of(req);
               reconciler_.request_qualification(req.matches[1], actor);
               send(res, 202, {{"data", {{"queued", true}, {"recipe_id", std::string(req.matches[1])}}}});
           }));
    h.Post("/api/v1/default", wrap("/api/v1/default", true, [this](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
               const json body = body_of(req);
               if (!body.contains("recipe_id") || !(body["recipe_id"].is_string() || body["recipe_id"].is_null()))
                   throw ApiError{400, "bad_request", "the body must be {\"recipe_id\": \"<id>\"} to pin, or {\"recipe_id\": null} to release the pin"};
               const std::optional<std::string> id = body["recipe_id"].is_null() ? std::nullopt : std::optional(body["recipe_id"].get<std::string>());
               reconciler_.pin(id, actor);
               send(res, 200, {{"data", {{"pinned", id ? json(*id) : json(nullptr)}}}});
           }));
    h.Post("/api/v1/promotion/freeze", wrap("/api/v1/promotion/freeze", true, [this](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
               const json body = body_of(req);
               if (body.contains("reason") && !body["reason"].is_string()) throw ApiError{400, "bad_request", "reason must be a string"};
               reconciler_.freeze(body.value("reason", std::string()), actor);
               send(res, 200, {{"data", {{"frozen", true}}}});
           }));
    h.Post("/api/v1/promotion/unfreeze", wrap("/api/v1/promotion/unfreeze", true, [this](const httplib::Request& req, httplib::Response& res, const std::string& actor) {
               body_of(req);
               reconciler_.unfreeze(actor);
               send(res, 200, {{"data", {{"frozen", false}}}});
           }));

    // Anything else: a JSON 404 (or 405 for a known path with the wrong method, which httplib reports as 404 too).
    // Other errors (a request that is not HTTP, too large, too slow) get the gate's JSON message.
    h.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (res.status == 404 && res.body.empty()) {
            send_error(res, 404, "not_found", "no route " + http::valid_utf8(req.method + " " + req.path) + " (see docs/API.md)");
            metrics_.record_request("unknown", res.status);
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
}

}  // namespace anvil::daemon
