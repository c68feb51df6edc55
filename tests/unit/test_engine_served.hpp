// Shared by the engine's HTTP tests: an Engine behind its server in this process, on a free
// loopback port, and the pieces of a streamed response.
#pragma once

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "engine/server.hpp"

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
