// The OpenAI-compatible HTTP server. Its threads parse, template and tokenize, then hand token ids
// to the engine and relay the engine's stream back: as one JSON body or as server-sent events.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

namespace anvil::http {
class GuardedServer;
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
    // Requests must carry 'Authorization: Bearer <api_key>' (all but /health and /metrics, as vLLM
    // does) when it is set.
    std::string api_key{};
    // Larger request bodies are refused unread (413); serve() sizes it from --max-context.
    std::size_t max_body_bytes = 8u << 20;
};

// The largest request body worth reading for a context of `max_context` tokens: room for every
// token as escaped JSON text, plus tools, schemas and the request's other fields.
std::size_t max_body_bytes_for_context(int max_context);

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
    std::unique_ptr<http::GuardedServer> http_;
    std::atomic<Engine*> engine_{nullptr};
    std::mutex error_mutex_;
    std::string load_error_;
};

}  // namespace anvil::engine
