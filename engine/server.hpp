// The OpenAI-compatible HTTP server. Its threads parse, template and tokenize, then hand token ids
// to the engine and relay the engine's stream back: as one JSON body or as server-sent events.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

namespace httplib {
class Server;
}

namespace anvil::engine {

class Engine;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;  // 0: any free port
    std::string served_model_name;
    int http_threads = 16;
    // A non-streaming response writes a space this often while it waits, so that a client that
    // went away is noticed (the write fails) and its sequence freed. JSON allows leading spaces.
    int heartbeat_ms = 1000;
};

class Server {
public:
    explicit Server(ServerOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds the socket; returns the port (the chosen one when options.port is 0). Throws when the
    // address cannot be bound.
    int bind();
    // Serves until stop(); /health answers 503 until set_engine().
    void serve();
    void stop();
    bool running() const;
    // The engine is loaded: requests are served from now on. It must outlive the server.
    void set_engine(Engine* engine);
    // Loading failed: /health reports the reason with 500.
    void set_load_error(const std::string& error);

private:
    void routes();

    ServerOptions options_;
    std::unique_ptr<httplib::Server> http_;
    std::atomic<Engine*> engine_{nullptr};
    std::mutex error_mutex_;
    std::string load_error_;
};

}  // namespace anvil::engine
