// StableEndpoint: the HTTP server, admission to the current Generation, the switch and its drain,
// and forwarding: plain requests are relayed whole on the HTTP thread; SSE streams are read by a
// thread of their own into a StreamPipe that the HTTP thread writes out piece by piece.
#include "daemon/endpoint/stable_endpoint.hpp"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/endpoint/generation.hpp"
#include "daemon/endpoint/stream_pipe.hpp"
#include "engine/http/guarded_server.hpp"
#include "engine/http/safe_text.hpp"

namespace anvil::endpoint {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// How often a waiting HTTP thread looks whether its client left or the endpoint is stopping.
constexpr auto kPoll = std::chrono::milliseconds(100);

std::string error_json(const std::string& message, const std::string& type, const std::string& code) {
    return http::dump_json({{"error", {{"message", message}, {"type", type}, {"code", code}}}});
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& code) {
    res.status = status;
    res.set_content(error_json(message, type, code), "application/json");
}

// The gate's own refusals (413, 408, 431, ...) in OpenAI's error shape.
std::string gate_error(int status, const std::string& message) {
    return error_json(message, status >= 500 ? "server_error" : "invalid_request_error", std::to_string(status));
}

http::ServerLimits limits_of(const EndpointOptions& o) {
    http::ServerLimits limits;
    limits.workers = std::max(o.threads, 2);
    limits.max_body_bytes = o.max_body_bytes;
    return limits;
}

void tag(httplib::Response& res, const Upstream& upstream) {
    res.set_header("x-anvil-engine", upstream.engine_id);
    res.set_header("x-anvil-recipe", upstream.recipe_id);
}

bool same_name(const std::string& a, const char* b) {
    return std::equal(a.begin(), a.end(), b, b + std::char_traits<char>::length(b),
                      [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y)); });
}

// Upstream response headers the client gets as they are; framing and connection headers belong to
// each hop, Content-Type is set with the body, and the x-anvil ones are the endpoint's own.
void copy_headers(const httplib::Headers& from, httplib::Response& res) {
    for (const auto& [name, value] : from) {
        if (same_name(name, "Content-Length") || same_name(name, "Transfer-Encoding") || same_name(name, "Connection") ||
            same_name(name, "Keep-Alive") || same_name(name, "Content-Type") || same_name(name, "x-anvil-engine") ||
            same_name(name, "x-anvil-recipe"))
            continue;
        res.headers.emplace(name, value);
    }
}

std::string content_type_of(const httplib::Headers& headers) {
    const auto it = headers.find("Content-Type");  // httplib's Headers compare names case-insensitively
    return it == headers.end() ? "application/json" : it->second;
}

std::string address_of(const Upstream& upstream) { return upstream.host + ":" + std::to_string(upstream.port); }

}  // namespace

struct StableEndpoint::Impl {
    explicit Impl(EndpointOptions o) : options(std::move(o)), server(limits_of(options), gate_error) {
        if (options.origin_policy) server.set_origin_policy(*options.origin_policy);
        routes();
    }

    EndpointOptions options;
    http::GuardedServer server;
    std::thread thread;
    int port = 0;
    std::atomic<bool> stopping{false};

    // Guards `current` and `generations`. Admission reads `current` and enters it under this lock,
    // so a switch that swaps `current` sees every request admitted to the old generation.
    mutable std::mutex mutex;
    std::shared_ptr<Generation> current;
    std::vector<std::weak_ptr<Generation>> generations;  // any that may still serve a request

    std::atomic<std::uint64_t> requests{0}, upstream_errors{0}, no_upstream{0}, in_flight{0}, switches{0};

    Admission admit() {
        std::lock_guard<std::mutex> lock(mutex);
        if (!current) return {};
        return Admission(current, &in_flight);
    }

    void answer_no_upstream(httplib::Response& res) {
        no_upstream.fetch_add(1);
        res.set_header("Retry-After", "1");
        send_error(res, 503, "no engine is serving behind this endpoint yet; retry shortly", "server_error", "no_upstream");
    }

    void answer_failure(httplib::Response& res, const Upstream& upstream, const SendOutcome& outcome) {
        const std::string where = "engine " + upstream.engine_id + " at " + address_of(upstream);
        switch (outcome.failure) {
            case Failure::unreachable:
                upstream_errors.fetch_add(1);
                spdlog::warn("endpoint: {} is unreachable: {}", where, outcome.detail);
                return send_error(res, 502, where + " cannot be reached (" + outcome.detail + ")", "server_error",
                                  "upstream_unreachable");
            case Failure::timeout:
                upstream_errors.fetch_add(1);
                spdlog::warn("endpoint: {} timed out: {}", where, outcome.detail);
                return send_error(res, 504, where + " did not answer in time", "server_error", "upstream_timeout");
            case Failure::reset:
                upstream_errors.fetch_add(1);
                spdlog::warn("endpoint: {} broke off the response: {}", where, outcome.detail);
                return send_error(res, 502, where + " broke off the response (" + outcome.detail + ")", "server_error",
                                  "upstream_reset");
            case Failure::cancelled:
            case Failure::closed:
            case Failure::none:
                res.set_header("Retry-After", "1");
                return send_error(res, 503, "the endpoint is stopping", "server_error", "endpoint_stopping");
        }
    }

    void routes() {
        for (const char* path : {"/v1/completions", "/v1/chat/completions", "/v1/embeddings"})
            server.Post(path, [this](const httplib::Request& req, httplib::Response& res) { forward(req, res); });
        server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res); });
        server.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
            const auto upstream = current_upstream();
            if (!upstream) {
                res.status = 503;
                res.set_content(json{{"status", "no-upstream"}}.dump(), "application/json");
                return;
            }
            tag(res, *upstream);
            res.set_content(http::dump_json({{"status", "ok"}, {"engine", upstream->engine_id}, {"recipe", upstream->recipe_id}}),
                            "application/json");
        });
        // Unknown paths get an OpenAI-style error; responses that already carry a body (ours, or an
        // upstream's error passed through) are left alone.
        // An exception in a handler is the gate's 500 (logged, no internal text to the client).
        server.set_error_handler(httplib::Server::HandlerWithResponse(
            [](const httplib::Request& req, httplib::Response& res) {
                if (!res.body.empty() || res.status != 404) return httplib::Server::HandlerResponse::Unhandled;
                send_error(res, 404, "no such endpoint: " + http::valid_utf8(req.method + " " + req.path), "invalid_request_error",
                           "not_found");
                return httplib::Server::HandlerResponse::Handled;
            }));
    }

    std::optional<Upstream> current_upstream() const {
        std::lock_guard<std::mutex> lock(mutex);
        if (!current) return std::nullopt;
        return current->upstream();
    }

    void models(httplib::Response& res) {
        requests.fetch_add(1);
        const Admission admission = admit();
        if (!admission) return answer_no_upstream(res);
        const Upstream& upstream = admission.generation().upstream();
        const auto created = std::chrono::duration_cast<std::chrono::seconds>(admission.generation().since().time_since_epoch()).count();
        json data = json::array();
        data.push_back({{"id", options.model_alias}, {"object", "model"}, {"created", created}, {"owned_by", "anvil"},
                        {"root", upstream.model}, {"engine", upstream.engine_id}, {"recipe", upstream.recipe_id}});
        if (upstream.model != options.model_alias)
            data.push_back({{"id", upstream.model}, {"object", "model"}, {"created", created}, {"owned_by", "anvil"},
                            {"root", upstream.model}, {"engine", upstream.engine_id}, {"recipe", upstream.recipe_id}});
        tag(res, upstream);
        res.set_content(http::dump_json({{"object", "list"}, {"data", std::move(data)}}), "application/json");
    }

    void forward(const httplib::Request& req, httplib::Response& res) {
        requests.fetch_add(1);
        Admission admission = admit();
        if (!admission) return answer_no_upstream(res);
        // A copy: a streaming request hands its admission (and with it the generation) to its reader.
        const Upstream upstream = admission.generation().upstream();
        tag(res, upstream);

        // The model check and rewrite. A body that is not a JSON object goes through unchanged, for
        // the engine to answer with its own error.
        std::string rewritten;
        bool stream = false;
        // Too deep or malformed: relayed as it is, for the engine to refuse.
        json doc = http::parse_json_body(req.body).value;
        if (doc.is_object()) {
            const auto model = doc.find("model");
            if (model == doc.end() || model->is_null()) {
                doc["model"] = upstream.model;
                rewritten = doc.dump(-1, ' ', false, json::error_handler_t::replace);
            } else if (model->is_string()) {
                const auto& asked = model->get_ref<const std::string&>();
                if (asked != upstream.model) {
                    if (asked != options.model_alias)
                        return send_error(res, 404,
                                          "the model '" + asked + "' does not exist; this endpoint serves '" +
                                              options.model_alias + "' (" + upstream.model + ")",
                                          "invalid_request_error", "model_not_found");
                    *model = upstream.model;
                    rewritten = doc.dump(-1, ' ', false, json::error_handler_t::replace);
                }
            }
            const auto flag = doc.find("stream");
            stream = flag != doc.end() && flag->is_boolean() && flag->get<bool>();
        }

        httplib::Request up;
        up.method = "POST";
        up.path = req.path;
        up.body = rewritten.empty() ? req.body : std::move(rewritten);
        up.headers.emplace("Content-Type", req.has_header("Content-Type") ? req.get_header_value("Content-Type") : "application/json");
        for (const char* name : {"Accept", "X-Request-Id"})
            if (req.has_header(name)) up.headers.emplace(name, req.get_header_value(name));
        // An engine anvild started has a key of its own, never the client's; an engine without one
        // gets what the client sent.
        if (!upstream.api_key.empty()) up.headers.emplace("Authorization", "Bearer " + upstream.api_key);
        else if (req.has_header("Authorization")) up.headers.emplace("Authorization", req.get_header_value("Authorization"));
        // Bodies are relayed byte for byte: the engine must not compress them for this hop.
        up.headers.emplace("Accept-Encoding", "identity");

        if (stream) return forward_stream(std::move(admission), upstream, std::move(up), res);

        int status = 0;
        httplib::Headers headers;
        std::string body;
        const SendOutcome outcome = admission.generation().send(
            up,
            [&](const httplib::Response& head) {
                status = head.status;
                headers = head.headers;
                return true;
            },
            [&](const char* data, std::size_t size) {
                body.append(data, size);
                return true;
            },
            nullptr);
        admission.release();
        if (outcome.failure != Failure::none) return answer_failure(res, upstream, outcome);
        res.status = status;
        copy_headers(headers, res);
        res.set_header("Content-Type", content_type_of(headers));
        res.body = std::move(body);
    }

    void forward_stream(Admission admission, const Upstream& upstream, httplib::Request up, httplib::Response& res) {
        auto pipe = std::make_shared<StreamPipe>();
        std::shared_ptr<std::thread> reader;
        try {
            reader = std::make_shared<std::thread>([pipe, up = std::move(up), admission = std::move(admission)]() mutable {
                SendOutcome outcome = admission.generation().send(
                    up, [&](const httplib::Response& head) { return pipe->set_head(head); },
                    [&](const char* data, std::size_t size) { return pipe->push(data, size); }, &pipe->cancel_slot());
                // The upstream is done with this request: the drain need not wait for the client to read it.
                admission.release();
                pipe->finish(std::move(outcome));
            });
        } catch (const std::system_error& e) {
            spdlog::error("endpoint: cannot start a stream reader: {}", e.what());
            res.set_header("Retry-After", "1");
            return send_error(res, 503, "the endpoint is out of threads; retry shortly", "server_error", "overloaded");
        }
        auto stop_reader = [pipe, reader] {
            pipe->cancel();
            if (reader->joinable()) reader->join();
        };

        while (!pipe->wait_started(kPoll)) {
            if (stopping.load()) {
                stop_reader();
                return answer_failure(res, upstream, SendOutcome{Failure::closed, "", false});
            }
        }
        const auto head = pipe->head();
        if (!head) {  // no response at all
            stop_reader();
            return answer_failure(res, upstream, pipe->end().value_or(SendOutcome{Failure::reset, "no response", false}));
        }
        const std::string content_type = content_type_of(head->headers);
        if (head->status != 200 || content_type.find("text/event-stream") == std::string::npos) {
            // An error (or an engine that answered without streaming): relay it whole, with its status.
            std::string body;
            while (pipe->pop(body, kPoll) != StreamPipe::Next::end) {
                if (stopping.load()) break;
            }
            const auto outcome = pipe->end();
            stop_reader();
            if (!outcome || outcome->failure != Failure::none)
                return answer_failure(res, upstream, outcome.value_or(SendOutcome{Failure::closed, "", true}));
            res.status = head->status;
            copy_headers(head->headers, res);
            res.set_header("Content-Type", content_type);
            res.body = std::move(body);
            return;
        }

        res.status = 200;
        copy_headers(head->headers, res);
        res.set_chunked_content_provider(
            content_type,
            [this, pipe, upstream](std::size_t, httplib::DataSink& sink) {
                std::string out;
                switch (pipe->pop(out, kPoll)) {
                    case StreamPipe::Next::data: return sink.write(out.data(), out.size());
                    case StreamPipe::Next::waiting: return sink.is_writable() && !stopping.load();
                    case StreamPipe::Next::end: break;
                }
                const auto outcome = pipe->end();
                if (outcome && outcome->failure != Failure::none) {
                    // The status line is gone; closing without the final chunk tells the client the
                    // stream is incomplete.
                    if (outcome->failure != Failure::cancelled && outcome->failure != Failure::closed) {
                        upstream_errors.fetch_add(1);
                        spdlog::warn("endpoint: the stream from engine {} at {} broke off: {}", upstream.engine_id,
                                     address_of(upstream), outcome->detail);
                    }
                    return false;
                }
                sink.done();
                return true;
            },
            // Runs when the response is finished or abandoned (client gone): the reader stops and is joined.
            [stop_reader](bool) { stop_reader(); });
    }
};

StableEndpoint::StableEndpoint(EndpointOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

http::GuardedServer& StableEndpoint::http() { return impl_->server; }

StableEndpoint::~StableEndpoint() { stop(); }

void StableEndpoint::bind() {
    if (impl_->port > 0) return;
    // A client or engine that closes its socket mid-response must not kill the daemon with SIGPIPE
    // (this httplib build sends without MSG_NOSIGNAL).
    std::signal(SIGPIPE, SIG_IGN);
    auto& server = impl_->server;
    server.set_tcp_nodelay(true);
    const auto& o = impl_->options;
    int port = o.port;
    if (port == 0) port = server.bind_to_any_port(o.host);
    else if (!server.bind_to_port(o.host, port)) port = -1;
    if (port <= 0)
        throw std::runtime_error("the stable endpoint cannot bind " + o.host + ":" + std::to_string(o.port) +
                                 (o.port ? ": is another server using it?" : ""));
    impl_->port = port;
}

void StableEndpoint::start() {
    if (impl_->thread.joinable()) throw std::runtime_error("the stable endpoint is already serving");
    bind();
    auto& server = impl_->server;
    const auto& o = impl_->options;
    impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
    // httplib's stop() does nothing before the accept loop runs; wait for it so stop() always works.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!server.is_running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!server.is_running()) {
        impl_->thread.join();
        throw std::runtime_error("the stable endpoint on " + o.host + ":" + std::to_string(impl_->port) + " did not start");
    }
    spdlog::info("endpoint: serving /v1 on http://{}:{} as '{}'", o.host, impl_->port, o.model_alias);
}

bool StableEndpoint::accepting() const { return impl_->thread.joinable(); }

void StableEndpoint::stop() {
    if (!impl_ || !impl_->thread.joinable()) return;
    impl_->stopping = true;
    // In-flight requests are aborted, not drained (switch_to(std::nullopt) first drains them).
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        for (const auto& weak : impl_->generations)
            if (auto generation = weak.lock()) generation->close();
    }
    impl_->server.stop();
    impl_->thread.join();
}

int StableEndpoint::port() const { return impl_->port; }

SwitchResult StableEndpoint::switch_to(std::optional<Upstream> next) {
    const auto started = Clock::now();
    auto fresh = next ? std::make_shared<Generation>(std::move(*next), impl_->options) : nullptr;
    std::shared_ptr<Generation> old;
    std::size_t at_switch = 0;
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        old = std::exchange(impl_->current, fresh);
        if (old) at_switch = old->in_flight();
        auto& generations = impl_->generations;
        generations.erase(std::remove_if(generations.begin(), generations.end(), [](const auto& w) { return w.expired(); }),
                          generations.end());
        if (fresh) {
            generations.push_back(fresh);
            if (impl_->stopping.load()) fresh->close();
        }
    }
    impl_->switches.fetch_add(1);
    const auto name = [](const std::shared_ptr<Generation>& g) {
        return g ? g->upstream().engine_id + " (" + g->upstream().recipe_id + ") at " + address_of(g->upstream()) : std::string("none");
    };
    spdlog::info("endpoint: switched from {} to {}; {} requests in flight on the old one", name(old), name(fresh), at_switch);

    SwitchResult result;
    if (old) {
        result.still_running = old->wait_idle(started + impl_->options.drain_timeout);
        result.drained = at_switch - std::min(at_switch, result.still_running);
    }
    result.waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    if (result.still_running > 0)
        spdlog::warn("endpoint: drain of {} timed out after {} ms with {} requests still running", name(old),
                     result.waited.count(), result.still_running);
    else if (old)
        spdlog::info("endpoint: drained {} ({} requests finished) in {} ms", name(old), result.drained, result.waited.count());
    return result;
}

std::optional<Upstream> StableEndpoint::current() const { return impl_->current_upstream(); }

EndpointStats StableEndpoint::stats() const {
    EndpointStats s;
    s.requests = impl_->requests.load();
    s.upstream_errors = impl_->upstream_errors.load();
    s.no_upstream = impl_->no_upstream.load();
    s.in_flight = impl_->in_flight.load();
    s.switches = impl_->switches.load();
    return s;
}

}  // namespace anvil::endpoint
