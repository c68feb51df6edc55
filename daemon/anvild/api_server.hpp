// anvild's REST API under /api/v1 (docs/API.md), plus /healthz, /readyz and /metrics, on cpp-httplib.
// Reads come from the ledger and the reconciler's snapshot; writes need the bearer token, are
// recorded with the actor `api:<token id>`, and wake the reconcile loop. Errors are JSON
// {error: {code, message}} with the matching status.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "daemon/config/config.hpp"
#include "daemon/controller/daemon_metrics.hpp"
#include "daemon/controller/reconciler.hpp"
#include "daemon/anvild/response_cache.hpp"
#include "state/store.hpp"

namespace anvil::http {
class GuardedServer;
}

namespace anvil::daemon {

// The id a token is known by in the ledger: the first 8 hex digits of its sha256 (never the token).
std::string token_id(const std::string& token);

class ApiServer {
public:
    ApiServer(const DaemonConfig& config, state::Store& store, Reconciler& reconciler, DaemonMetrics& metrics, std::string token);
    ~ApiServer();

    // Binds config.listen (port 0: any free port) and serves on a background thread.
    void start();
    // Stops accepting and waits for requests in progress.
    void stop();
    int port() const { return port_; }

    // The server itself, for feeding it raw bytes (GuardedServer::handle_bytes) in the fuzz target
    // and tests: no socket, the real parsing, admission, routing and handlers.
    http::GuardedServer& http() { return *http_; }

private:
    void routes();

    const DaemonConfig& config_;
    state::Store& store_;
    Reconciler& reconciler_;
    DaemonMetrics& metrics_;
    std::string token_;
    std::string actor_;  // "api:<token id>": who the ledger says made a write
    std::unique_ptr<http::GuardedServer> http_;
    // GET /api/v1/recipes pages by their query, while the ledger has not changed since.
    ResponseCache recipe_pages_{512};
    std::thread thread_;
    int port_ = 0;
};

}  // namespace anvil::daemon
