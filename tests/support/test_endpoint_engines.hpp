// Shared by the stable endpoint's tests: real anvil-engine processes serving the small make-model
// model (made once per test run) on free ports, and an HTTP client that records how a response
// arrived (status, headers, body pieces), for requests made directly or through the endpoint.
#pragma once

#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/endpoint/stable_endpoint.hpp"
#include "daemon/drivers/process_spawn.hpp"
#include "test_support.hpp"

namespace anvil::test::endpoint {

using nlohmann::json;

// The port in anvil-engine's "listening on http://127.0.0.1:PORT" line, or 0 for any other line.
inline int listening_port(const std::string& line) {
    const std::string marker = "listening on http://127.0.0.1:";
    const auto at = line.find(marker);
    return at == std::string::npos ? 0 : std::atoi(line.c_str() + at + marker.size());
}

// The small preset, seed 1, made once: every engine of the run serves it.
inline const std::filesystem::path& small_model() {
    static TempDir dir;
    static const std::filesystem::path model = [] {
        const auto out = dir / "small";
        const auto made = run({ANVIL_ENGINE, "make-model", "--out", out.string(), "--preset", "small", "--seed", "1"});
        if (made.exit_code != 0) throw std::runtime_error("make-model failed: " + made.output);
        return out;
    }();
    return model;
}

struct Reply {
    int status = 0;     // 0: no HTTP response at all (see error)
    std::string error;  // httplib's error name when status is 0
    httplib::Headers headers;
    std::string body;
    int pieces = 0;  // body pieces as received: one per chunk of a chunked response

    std::string header(const std::string& name) const {
        const auto it = headers.find(name);
        return it == headers.end() ? "" : it->second;
    }
    json parsed() const { return json::parse(body); }
};

class HttpClient {
public:
    explicit HttpClient(int port, int read_timeout_s = 60) : client_("127.0.0.1", port) {
        client_.set_keep_alive(true);
        client_.set_tcp_nodelay(true);
        client_.set_read_timeout(read_timeout_s, 0);
        client_.set_connection_timeout(30, 0);  // the shared CI machine can be slow to accept
    }
    Reply post(const std::string& path, const json& body) { return send("POST", path, body.dump()); }
    Reply get(const std::string& path) { return send("GET", path, ""); }
    Reply send(const std::string& method, const std::string& path, const std::string& body) {
        Reply reply;
        httplib::Request req;
        req.method = method;
        req.path = path;
        req.body = body;
        if (!body.empty()) req.headers.emplace("Content-Type", "application/json");
        req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
            reply.body.append(data, size);
            reply.pieces += 1;
            return true;
        };
        httplib::Response res;
        httplib::Error error = httplib::Error::Success;
        if (client_.send(req, res, error)) {
            reply.status = res.status;
            reply.headers = res.headers;
        } else {
            reply.error = httplib::to_string(error);
        }
        return reply;
    }

private:
    httplib::Client client_;
};

// The text of a completion or chat response, streamed (SSE) or not.
inline std::string text_of(const Reply& reply) {
    if (reply.header("Content-Type").find("text/event-stream") == std::string::npos) {
        const json doc = reply.parsed();
        const json& choice = doc.at("choices").at(0);
        return choice.contains("message") ? choice["message"]["content"].get<std::string>() : choice["text"].get<std::string>();
    }
    std::string text;
    size_t at = 0;
    while ((at = reply.body.find("data: ", at)) != std::string::npos) {
        const size_t end = reply.body.find("\n\n", at);
        const std::string data = reply.body.substr(at + 6, end - at - 6);
        at = end;
        if (data == "[DONE]") break;
        const json event = json::parse(data);
        if (event.at("choices").empty()) continue;
        const json& choice = event["choices"][0];
        if (choice.contains("delta")) text += choice["delta"].value("content", "");
        else text += choice.value("text", "");
    }
    return text;
}

inline bool stream_complete(const Reply& reply) { return reply.body.find("data: [DONE]\n\n") != std::string::npos; }

inline json completion(const std::string& prompt, int max_tokens, json extra = json::object()) {
    json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    body.update(extra);
    return body;
}

// `anvil-engine serve` on a free port, ready (/health 200) when constructed; killed when destroyed.
class EngineProcess {
public:
    EngineProcess(std::string name, const std::string& weights, int max_seqs = 8) : name_(std::move(name)) {
        process_ = std::make_unique<ChildProcess>(std::vector<std::string>{
            ANVIL_ENGINE, "serve", "--model", small_model().string(), "--host", "127.0.0.1", "--port", "0",
            "--served-model-name", name_, "--weights", weights, "--max-seqs", std::to_string(max_seqs),
            "--max-context", "512", "--threads", "1"});
        std::string line;
        while (port_ == 0 && process_->read_line(line, 60000)) port_ = listening_port(line);
        if (port_ == 0) throw std::runtime_error("anvil-engine serve " + name_ + " did not say its port");
        httplib::Client probe("127.0.0.1", port_);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        for (;;) {
            auto health = probe.Get("/health");
            if (health && health->status == 200) break;
            if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error(name_ + " never became healthy");
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }

    int port() const { return port_; }
    const std::string& name() const { return name_; }
    anvil::endpoint::Upstream upstream() const {
        return {"127.0.0.1", port_, name_, "engine-" + name_, "recipe-" + name_};
    }
    // SIGSTOP returns once the engine is stopped: kill() only queues the signal, and a request sent
    // at once was answered in CI (under ASan) before it took effect.
    void signal(int sig) {
        process_->kill(sig);
        if (sig != SIGSTOP) return;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        const auto all_stopped = [&] {  // every thread: the HTTP ones answer requests
            std::error_code ec;
            for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(process_->pid()) + "/task", ec)) {
                const auto stat = anvil::drivers::read_proc_stat(std::stoi(task.path().filename().string()));
                if (stat && stat->state != 'T') return false;
            }
            return true;
        };
        while (std::chrono::steady_clock::now() < deadline) {
            if (all_stopped()) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        throw std::runtime_error("engine " + name_ + " did not stop on SIGSTOP within 10 s");
    }
    void kill() {
        process_->kill(SIGKILL);
        process_->wait();
    }

private:
    std::string name_;
    std::unique_ptr<ChildProcess> process_;
    int port_ = 0;
};

// Engines shared by the tests that leave them running: A (f32 weights) and B (q8).
inline EngineProcess& engine_a() {
    static EngineProcess a("small-f32", "f32");
    return a;
}
inline EngineProcess& engine_b() {
    static EngineProcess b("small-q8", "q8");
    return b;
}

}  // namespace anvil::test::endpoint
