// Shared by the engine's HTTP tests: an Engine behind its server in this process, on a free
// loopback port, and the pieces of a streamed response.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/server.hpp"
#include "test_support.hpp"

namespace anvil::test::engine {

class InProcessServer {
public:
    // `server.port` is ignored: the server binds a free port.
    InProcessServer(const std::filesystem::path& model_dir, const anvil::engine::EngineOptions& options,
                    anvil::engine::ServerOptions server)
        : engine_(std::make_unique<anvil::engine::Engine>(model_dir, options)) {
        server.host = "127.0.0.1";
        server.port = 0;
        server_ = std::make_unique<anvil::engine::Server>(server);
        port_ = server_->bind();
        server_->set_engine(engine_.get());
        thread_ = std::thread([this] { server_->serve(); });
        while (!server_->running()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ~InProcessServer() {
        server_->stop();
        thread_.join();
        server_.reset();
        engine_.reset();
    }
    InProcessServer(const InProcessServer&) = delete;
    InProcessServer& operator=(const InProcessServer&) = delete;

    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(120, 0);
        c.set_connection_timeout(30, 0);  // the shared CI machine can be slow to accept
        return c;
    }
    anvil::engine::Engine& engine() { return *engine_; }
    const anvil::engine::Engine& engine() const { return *engine_; }
    int port() const { return port_; }

private:
    std::unique_ptr<anvil::engine::Engine> engine_;
    std::unique_ptr<anvil::engine::Server> server_;
    std::thread thread_;
    int port_ = 0;
};

// The tiny test model of `arch` written to `dir` (seed 3) and served in-process with one OpenMP
// thread, as model "tiny"; `options` says the rest. `positions` > 0 raises the model's 512
// positions (its weights do not depend on them: RoPE takes any position) for long prompts.
inline std::unique_ptr<InProcessServer> serve_tiny(const std::filesystem::path& dir, anvil::engine::EngineOptions options,
                                                   const char* arch = "llama", int positions = 0) {
    anvil::engine::make_model({dir, "tiny", arch, "f32", 3, 1});
    if (positions > 0) {
        nlohmann::json config = nlohmann::json::parse(anvil::test::read_file(dir / "config.json"));
        config["max_position_embeddings"] = positions;
        anvil::test::write_file(dir / "config.json", config.dump());
    }
    options.threads = 1;
    anvil::engine::ServerOptions server;
    server.served_model_name = "tiny";
    server.heartbeat_ms = 1;
    return std::make_unique<InProcessServer>(dir, options, server);
}

// The data payloads of an SSE response, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
    std::vector<std::string> events;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
        const size_t end = body.find("\n\n", at);
        events.push_back(body.substr(at + 6, end - at - 6));
        at = end;
    }
    return events;
}

}  // namespace anvil::test::engine
