#include "engine/server.hpp"

#include <httplib.h>

#include <chrono>
#include <csignal>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/engine.hpp"
#include "engine/http/guarded_server.hpp"
#include "engine/http/safe_text.hpp"
#include "engine/openai_request.hpp"
#include "engine/unicode.hpp"

namespace anvil::engine {

using nlohmann::json;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);

std::string error_json(int status, const std::string& message, const char* type) {
    return http::dump_json({{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}});
}

const char* error_type(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 404: return "not_found_error";
        case 503: return "service_unavailable";
        default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

void send_error(httplib::Response& res, int status, const std::string& message, const char* type = "invalid_request_error") {
    res.status = status;
    res.set_content(error_json(status, message, type), "application/json");
}

json parse_body(const std::string& text) {
    http::ParsedBody body = http::parse_json_body(text);
    if (!body.ok()) throw InvalidRequest("the request body is not valid JSON: " + body.error);
    return std::move(body.value);
}

int64_t now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string request_id(const char* prefix) {
    static std::atomic<uint64_t> counter{0};
    char text[64];
    std::snprintf(text, sizeof text, "%s-%llx%06llx", prefix, static_cast<unsigned long long>(now_seconds()),
                  static_cast<unsigned long long>(++counter));
    return text;
}

json token_bytes_json(const std::string& bytes) {
    json out = json::array();
    for (unsigned char c : bytes) out.push_back(int(c));
    return out;
}

enum class Api { Completions, Chat };

// Accumulates a request's events into OpenAI's shapes, for one body or for SSE chunks; one
// Choice per sequence of the request (n of them), each with its own text and logprobs.
struct Reply {
    Reply(Api api_, const Engine& engine_, std::string id_, std::string model_, int64_t created_, bool want_logprobs_,
          int n, std::string echo_)
        : api(api_), engine(engine_), id(std::move(id_)), model(std::move(model_)), created(created_),
          want_logprobs(want_logprobs_), echo(std::move(echo_)), choices(size_t(n)) {
        for (auto& c : choices) c.text_offset = echo.size();  // the completion's text follows the echo
    }

    struct Choice {
        std::string text;
        std::string finish_reason;
        int completion_tokens = 0;
        bool done = false;
        bool first = true;  // no chunk of it sent yet: the chat role and the echoed prompt go first
        json chat_logprobs = json::array();
        json completion_logprobs = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                                    {"top_logprobs", json::array()}, {"text_offset", json::array()}};
        size_t text_offset = 0;     // of the next generated token, in echo + text
        size_t prompt_offset = 0;   // of the next prompt token (echo with logprobs)
        bool prompt_started = false;
        // Tools: the answer's text passes through the stream, which holds back what may be a call;
        // `delta` is what this event lets through, `visible` all that was let through.
        std::optional<ToolCallStream> tool_stream;
        std::string delta, visible;
        std::vector<ToolCall> calls;
    };

    Api api;
    const Engine& engine;
    std::string id, model;
    int64_t created;
    bool want_logprobs;
    std::string echo;  // completions with echo: the prompt, put before each choice's text
    // echo with logprobs: the prompt's token ids (the first has no logprob: nothing precedes it),
    // and whether the echo is the client's own string, which leaves special tokens' text out.
    std::vector<int32_t> prompt_ids;
    bool echo_is_text = false;
    // Chat with tools offered: each choice's answer is parsed for calls in the family's syntax.
    ToolRequest tools;
    void offer_tools(ToolRequest t, ChatFamily family) {
        tools = std::move(t);
        for (auto& c : choices) c.tool_stream.emplace(family, &tools.tools);
    }
    std::vector<Choice> choices;
    int prompt_tokens = 0;
    size_t done = 0;

    bool all_done() const { return done == choices.size(); }
    Choice& choice_of(const StreamEvent& e) {
        if (e.index < 0 || size_t(e.index) >= choices.size()) throw std::logic_error("an event for a choice not asked for");
        return choices[size_t(e.index)];
    }

    // The logprobs of an event's tokens in the API's shape.
    json logprobs_of(const StreamEvent& e, Choice& c) {
        const Tokenizer& tok = engine.tokenizer();
        if (api == Api::Chat) {
            json content = json::array();
            for (const auto& t : e.tokens) {
                json top = json::array();
                for (const auto& alt : t.top)
                    top.push_back({{"token", sanitize_utf8(tok.token_bytes(alt.token))},
                                   {"logprob", alt.logprob},
                                   {"bytes", token_bytes_json(tok.token_bytes(alt.token))}});
                content.push_back({{"token", sanitize_utf8(tok.token_bytes(t.token))},
                                   {"logprob", t.logprob},
                                   {"bytes", token_bytes_json(tok.token_bytes(t.token))},
                                   {"top_logprobs", top}});
            }
            return json{{"content", content}};
        }
        json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                    {"text_offset", json::array()}};
        // Prompt tokens first: the first one with null logprobs, as vLLM and OpenAI give it.
        const auto prompt_piece = [&](int32_t token) {
            const std::string piece = sanitize_utf8(tok.token_bytes(token));
            out["tokens"].push_back(piece);
            out["text_offset"].push_back(c.prompt_offset);
            c.prompt_offset += echo_is_text && tok.is_special(token) ? 0 : piece.size();
        };
        if ((!e.prompt.empty() || !e.tokens.empty()) && !c.prompt_started && !prompt_ids.empty()) {
            c.prompt_started = true;
            prompt_piece(prompt_ids[0]);
            out["token_logprobs"].push_back(nullptr);
            out["top_logprobs"].push_back(nullptr);
        }
        for (const auto& t : e.prompt) {
            prompt_piece(t.token);
            out["token_logprobs"].push_back(t.logprob);
            json top = json::object();
            for (const auto& alt : t.top) top[sanitize_utf8(tok.token_bytes(alt.token))] = alt.logprob;
            out["top_logprobs"].push_back(top);
        }
        for (const auto& t : e.tokens) {
            const std::string piece = sanitize_utf8(tok.token_bytes(t.token));
            out["tokens"].push_back(piece);
            out["token_logprobs"].push_back(t.logprob);
            json top = json::object();
            for (const auto& alt : t.top) top[sanitize_utf8(tok.token_bytes(alt.token))] = alt.logprob;
            out["top_logprobs"].push_back(top);
            out["text_offset"].push_back(c.text_offset);
            c.text_offset += piece.size();
        }
        return out;
    }

    // Records the event; returns its logprobs (null when none) for a stream chunk.
    json absorb(const StreamEvent& e) {
        Choice& c = choice_of(e);
        c.text += e.text;
        c.delta = c.tool_stream ? c.tool_stream->push(e.text) : e.text;
        if (e.done && c.tool_stream && !c.done) {
            ParsedAnswer parsed = c.tool_stream->finish();
            c.delta += parsed.content;
            c.calls = std::move(parsed.calls);
        }
        c.visible += c.delta;
        json l;
        if (want_logprobs && (!e.tokens.empty() || !e.prompt.empty())) {
            l = logprobs_of(e, c);
            if (api == Api::Chat) {
                for (auto& x : l["content"]) c.chat_logprobs.push_back(x);
            } else {
                for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
                    for (auto& v : l[key]) c.completion_logprobs[key].push_back(v);
            }
        }
        if (e.done && !c.done) {
            c.done = true;
            ++done;
            c.finish_reason = !c.calls.empty() && e.finish_reason == "stop" ? "tool_calls" : e.finish_reason;
            c.completion_tokens = e.completion_tokens;
            prompt_tokens = e.prompt_tokens;
        }
        return l;
    }

    json usage() const {
        int completion = 0;
        for (const auto& c : choices) completion += c.completion_tokens;
        return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion}, {"total_tokens", prompt_tokens + completion}};
    }

    json body() const {
        json list = json::array();
        for (size_t i = 0; i < choices.size(); ++i) {
            const Choice& c = choices[i];
            json choice = {{"index", i}, {"finish_reason", c.finish_reason}};
            if (api == Api::Chat) {
                choice["message"] = {{"role", "assistant"}, {"content", c.visible}};
                if (!c.calls.empty()) {
                    if (c.visible.empty()) choice["message"]["content"] = nullptr;
                    json calls = json::array();
                    for (const auto& call : c.calls)
                        calls.push_back({{"id", call.id}, {"type", "function"},
                                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
                    choice["message"]["tool_calls"] = calls;
                }
                choice["logprobs"] = want_logprobs ? json{{"content", c.chat_logprobs}} : json();
            } else {
                choice["text"] = echo + c.text;
                choice["logprobs"] = want_logprobs ? c.completion_logprobs : json();
            }
            list.push_back(std::move(choice));
        }
        return {{"id", id},
                {"object", api == Api::Chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", list},
                {"usage", usage()}};
    }

    // One SSE chunk for an absorbed event (a choice's first chat chunk also carries the role,
    // its first completion chunk the echoed prompt).
    json chunk(const StreamEvent& e, json logprobs) {
        Choice& c = choice_of(e);
        json choice = {{"index", e.index}, {"finish_reason", e.done ? json(c.finish_reason) : json()}};
        if (api == Api::Chat) {
            json delta = json::object();
            if (c.first) delta["role"] = "assistant";
            if (!c.delta.empty() || !c.first) delta["content"] = c.delta;
            choice["delta"] = delta;
        } else {
            choice["text"] = c.first ? echo + e.text : e.text;
        }
        c.first = false;
        choice["logprobs"] = std::move(logprobs);
        return wrap(choice);
    }

    // A choice's calls as OpenAI streams them, before its last chunk: for each, one delta with
    // its id, type and name (and empty arguments), then one with the arguments.
    std::vector<json> call_chunks(const StreamEvent& e) {
        std::vector<json> out;
        const Choice& c = choice_of(e);
        for (size_t i = 0; i < c.calls.size(); ++i) {
            const ToolCall& call = c.calls[i];
            json head = {{"index", i}, {"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", ""}}}};
            json body = {{"index", i}, {"function", {{"arguments", call.arguments}}}};
            for (json* part : {&head, &body})
                out.push_back(wrap({{"index", e.index}, {"delta", {{"tool_calls", json::array({*part})}}},
                                    {"finish_reason", nullptr}, {"logprobs", nullptr}}));
        }
        return out;
    }

    json wrap(json choice) const {
        return {{"id", id},
                {"object", api == Api::Chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array({std::move(choice)})}};
    }

    // The last chunk when the client asked for usage: no choices.
    json usage_chunk() const {
        return {{"id", id},
                {"object", api == Api::Chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array()},
                {"usage", usage()}};
    }
};

}  // namespace

std::size_t max_body_bytes_for_context(int max_context) {
    return (std::size_t(1) << 20) + std::size_t(std::max(max_context, 0)) * 32;
}

namespace {

http::ServerLimits limits_of(const ServerOptions& o) {
    http::ServerLimits limits;
    limits.workers = std::max(o.http_threads, 4);
    limits.max_body_bytes = o.max_body_bytes;
    return limits;
}

}  // namespace

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      http_(std::make_unique<http::GuardedServer>(limits_of(options_), [](int status, const std::string& message) {
          return error_json(status, message, error_type(status));
      })) {
    // A client that disconnects mid-response must not kill the process with SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    if (!options_.api_key.empty())
        http_->set_admission([key = options_.api_key](const httplib::Request& req) -> std::optional<http::Refusal> {
            if (req.path == "/health" || req.path == "/metrics") return std::nullopt;
            if (http::has_bearer_token(req, key)) return std::nullopt;
            return http::Refusal{401, "this engine needs 'Authorization: Bearer <key>' with the key it was started with (--api-key)"};
        });
    // Stream chunks are small writes: with Nagle's algorithm each waits for the client's delayed
    // ACK (40 ms on Linux), which bunches tokens together and skews every client's TTFT.
    http_->set_tcp_nodelay(true);
    routes();
}

Server::~Server() { stop(); }

int Server::bind() {
    int port = options_.port;
    if (port == 0) {
        port = http_->bind_to_any_port(options_.host);
        if (port < 0) throw std::runtime_error("cannot bind " + options_.host + " to any port");
    } else if (!http_->bind_to_port(options_.host, port)) {
        throw std::runtime_error("cannot bind " + options_.host + ":" + std::to_string(port) +
                                 ": is another server using it? Choose another --port");
    }
    return port;
}

void Server::serve() { http_->listen_after_bind(); }

void Server::stop() {
    if (http_) http_->stop();
}

bool Server::running() const { return http_ && http_->is_running(); }

void Server::set_engine(Engine* engine) { engine_ = engine; }

void Server::set_load_error(const std::string& error) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    load_error_ = error;
}

void Server::routes() {
    auto& http = *http_;
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        if (engine_.load()) {
            res.status = 200;
            res.set_content("{\"status\":\"ok\"}", "application/json");
            return;
        }
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!load_error_.empty()) return send_error(res, 500, "loading the model failed: " + load_error_, "server_error");
        send_error(res, 503, "the model is loading", "service_unavailable");
    });

    // Everything else needs the engine; while loading they answer 503 like /health.
    auto with_engine = [this](auto handler) {
        return [this, handler](const httplib::Request& req, httplib::Response& res) {
            Engine* engine = engine_.load();
            if (!engine) return send_error(res, 503, "the model is loading; retry when /health answers 200", "service_unavailable");
            try {
                handler(*engine, req, res);
            } catch (const InvalidRequest& e) {
                engine->metrics().requests_rejected += 1;
                send_error(res, 400, e.what());
            } catch (const json::exception& e) {
                engine->metrics().requests_rejected += 1;
                send_error(res, 400, http::valid_utf8(std::string("the request body is not valid JSON: ") + e.what()));
            } catch (const std::exception& e) {
                spdlog::error("{} {}: {}", http::valid_utf8(req.method), http::valid_utf8(req.path), http::valid_utf8(e.what()));
                send_error(res, 500, "internal error; the engine's log has the details", "server_error");
            }
        };
    };

    http.Get("/v1/models", with_engine([this](Engine& engine, const httplib::Request&, httplib::Response& res) {
        json model = {{"id", options_.served_model_name},
                      {"object", "model"},
                      {"created", now_seconds()},
                      {"owned_by", "anvil"},
                      {"max_model_len", engine.options().max_context}};
        if (engine.draft().kind != DraftKind::None) model["draft"] = engine.draft().describe();
        res.set_content(http::dump_json({{"object", "list"}, {"data", json::array({model})}}), "application/json");
    }));

    http.Get("/metrics", with_engine([this](Engine& engine, const httplib::Request&, httplib::Response& res) {
        res.set_content(engine.metrics().prometheus_text(options_.served_model_name), "text/plain; version=0.0.4");
    }));

    http.Post("/tokenize", with_engine([](Engine& engine, const httplib::Request& req, httplib::Response& res) {
        const json body = parse_body(req.body);
        if (!body.is_object()) throw InvalidRequest("the request body must be a JSON object");
        const bool add_special = body.value("add_special_tokens", true);
        std::vector<int32_t> tokens;
        if (body.contains("messages")) {
            const ParsedRequest chat = parse_chat_request(body);
            if (!engine.chat_template()) throw InvalidRequest(engine.chat_template_error());
            tokens = engine.tokenizer().encode(engine.chat_template()->render(chat.messages), false);
        } else if (body.contains("prompt") && body["prompt"].is_string()) {
            tokens = engine.tokenizer().encode(body["prompt"].get<std::string>(), add_special);
        } else {
            throw InvalidRequest("give prompt (a string) or messages");
        }
        res.set_content(http::dump_json({{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", engine.options().max_context}}),
                        "application/json");
    }));

    auto generate = [this](Api api) {
        return [this, api](Engine& engine, const httplib::Request& req, httplib::Response& res) {
            const json body = parse_body(req.body);
            ParsedRequest parsed =
                api == Api::Chat ? parse_chat_request(body, req.body) : parse_completion_request(body, req.body);
            if (!parsed.model.empty() && parsed.model != options_.served_model_name) {
                engine.metrics().requests_rejected += 1;
                return send_error(res, 404, "the model '" + parsed.model + "' does not exist; this server serves '" +
                                                options_.served_model_name + "'",
                                  "not_found_error");
            }
            std::vector<int32_t> prompt;
            try {
                if (api == Api::Chat) {
                    if (!engine.chat_template()) throw InvalidRequest(engine.chat_template_error());
                    prompt = engine.tokenizer().encode(engine.chat_template()->render(parsed.messages, &parsed.tools), false);
                    const bool forced = parsed.tools.active() && (parsed.tools.choice == ToolChoice::Required ||
                                                                  parsed.tools.choice == ToolChoice::Named);
                    if (forced && parsed.params.grammar)
                        throw InvalidRequest("response_format and tool_choice " +
                                             std::string(parsed.tools.choice == ToolChoice::Named ? "naming a function" : "required") +
                                             " cannot both constrain one answer: ask for one of them");
                    if (forced) {
                        try {
                            parsed.params.grammar = call_grammar(engine.chat_template()->family(), parsed.tools);
                        } catch (const UnsupportedSchema& e) {
                            throw InvalidRequest(sanitize_utf8(e.what()));
                        }
                    }
                } else if (parsed.prompt) {
                    prompt = engine.tokenizer().encode(*parsed.prompt, true);
                } else {
                    prompt = parsed.prompt_tokens;
                }
            } catch (const std::invalid_argument& e) {
                throw InvalidRequest(e.what());
            } catch (const std::runtime_error& e) {
                throw InvalidRequest(e.what());  // what the chat template or tokenizer refuses
            }
            const int room = engine.options().max_context - int(prompt.size());
            if (!parsed.max_tokens_given && api == Api::Chat) parsed.params.max_tokens = std::max(room, 1);
            // echo: the prompt as the client wrote it, or its tokens' text.
            std::string echo;
            if (parsed.echo)
                echo = parsed.prompt ? *parsed.prompt : sanitize_utf8(engine.tokenizer().decode(prompt, false));
            const bool want_logprobs = parsed.params.logprobs >= 0;

            std::vector<int32_t> prompt_ids;
            if (parsed.params.prompt_logprobs >= 0) prompt_ids = prompt;
            auto stream = engine.submit(std::move(prompt), parsed.params, parsed.n);

            auto state = std::make_shared<Reply>(api, engine, request_id(api == Api::Chat ? "chatcmpl" : "cmpl"),
                                                 options_.served_model_name, now_seconds(), want_logprobs, parsed.n,
                                                 std::move(echo));
            state->prompt_ids = std::move(prompt_ids);
            if (api == Api::Chat && parsed.tools.active()) state->offer_tools(parsed.tools, engine.chat_template()->family());
            state->echo_is_text = parsed.prompt.has_value();
            Metrics* metrics = &engine.metrics();
            auto finished = std::make_shared<bool>(false);
            auto on_release = [stream, finished, metrics](bool) {
                if (!*finished) stream->cancel();
                else metrics->requests_ok += 1;
            };
            if (parsed.stream) {
                const bool include_usage = parsed.include_usage;
                res.set_chunked_content_provider(
                    "text/event-stream",
                    [stream, state, finished, include_usage](size_t, httplib::DataSink& sink) {
                        auto event = stream->pop(kPoll);
                        if (!event) return sink.is_writable();
                        if (!event->error.empty()) {
                            const std::string data = "data: " + http::dump_json({{"error", {{"message", event->error}, {"type", "server_error"}}}}) + "\n\n";
                            sink.write(data.data(), data.size());
                            *finished = true;
                            sink.done();
                            return true;
                        }
                        json logprobs = state->absorb(*event);
                        const auto& choice = state->choices[size_t(event->index)];
                        const std::string& shown = state->api == Api::Chat ? choice.delta : event->text;
                        if (shown.empty() && !event->done && logprobs.is_null() && !(choice.first && !state->echo.empty()))
                            return true;
                        std::string data;
                        if (event->done)
                            for (const json& c : state->call_chunks(*event)) data += "data: " + http::dump_json(c) + "\n\n";
                        data += "data: " + http::dump_json(state->chunk(*event, std::move(logprobs))) + "\n\n";
                        const bool last = state->all_done();
                        if (last) {
                            if (include_usage) data += "data: " + http::dump_json(state->usage_chunk()) + "\n\n";
                            data += "data: [DONE]\n\n";
                        }
                        if (!sink.write(data.data(), data.size())) return false;
                        if (last) {
                            *finished = true;
                            sink.done();
                        }
                        return true;
                    },
                    on_release);
            } else {
                auto last_write = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
                const auto heartbeat = std::chrono::milliseconds(options_.heartbeat_ms);
                res.set_chunked_content_provider(
                    "application/json",
                    [stream, state, finished, last_write, heartbeat](size_t, httplib::DataSink& sink) {
                        // A client that left is seen here, within a token, rather than when a heartbeat
                        // write fails (the first write after the peer closed still succeeds).
                        if (!sink.is_writable()) return false;
                        if (auto event = stream->pop(kPoll)) {
                            std::string data;
                            if (!event->error.empty()) {
                                data = http::dump_json({{"error", {{"message", event->error}, {"type", "server_error"}}}});
                            } else {
                                state->absorb(*event);
                                if (state->all_done()) data = http::dump_json(state->body());
                            }
                            if (!data.empty()) {
                                if (!sink.write(data.data(), data.size())) return false;
                                *finished = true;
                                sink.done();
                                return true;
                            }
                        }
                        if (std::chrono::steady_clock::now() - *last_write < heartbeat) return true;
                        *last_write = std::chrono::steady_clock::now();
                        return sink.write(" ", 1);
                    },
                    on_release);
            }
        };
    };
    http.Post("/v1/completions", with_engine(generate(Api::Completions)));
    http.Post("/v1/chat/completions", with_engine(generate(Api::Chat)));

    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
        if (res.status == 404 && res.body.empty()) send_error(res, 404, "no such endpoint", "not_found_error");
        return httplib::Server::HandlerResponse::Unhandled;
    });
}

}  // namespace anvil::engine
