// The stable OpenAI-compatible endpoint: one address clients keep using while the engine behind it
// changes. It forwards /v1/* (streaming included) to the current default engine; a switch stops
// admitting to the old engine, lets its in-flight requests finish (bounded drain) and admits every
// new request to the new one, so clients see no failed request across a promotion.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/http/origin_policy.hpp"

namespace anvil::http {
class GuardedServer;
}

namespace anvil::endpoint {

struct Upstream {
    std::string host = "127.0.0.1";
    int port = 0;
    std::string model;      // the engine's served model id; requests are rewritten to it
    std::string engine_id;  // for logs, headers and stats
    std::string recipe_id;
    std::string api_key{};  // sent to the engine as its bearer token, when it has one
};

struct EndpointOptions {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port (see StableEndpoint::port)
    // Clients may ask for this id, the upstream's own model id, or omit "model"; anything else is
    // a 404 model_not_found. /v1/models lists the alias and the upstream's id.
    std::string model_alias = "anvil-default";
    std::chrono::milliseconds drain_timeout{std::chrono::seconds(30)};
    std::chrono::milliseconds upstream_timeout{std::chrono::seconds(600)};
    int threads = 32;                                // requests forwarded at once
    std::size_t max_body_bytes = std::size_t(64) << 20;  // larger request bodies get 413 unread
    std::optional<http::OriginPolicy> origin_policy;     // the Host names and Origins answered (none: any)
};

struct SwitchResult {
    std::size_t drained = 0;        // requests to the old upstream that finished during the drain
    std::size_t still_running = 0;  // requests still on the old upstream when the drain timed out
    std::chrono::milliseconds waited{0};
};

struct EndpointStats {
    std::uint64_t requests = 0;
    std::uint64_t upstream_errors = 0;  // upstream unreachable or reset (502/504 answered)
    std::uint64_t no_upstream = 0;      // 503 answered: nothing to forward to
    std::uint64_t in_flight = 0;
    std::uint64_t switches = 0;
};

// What the controller needs of the endpoint: which engine it forwards to, and a switch that
// drains the old one. StableEndpoint is the real one; controller tests give a recording one.
class UpstreamSwitch {
public:
    virtual ~UpstreamSwitch() = default;
    virtual SwitchResult switch_to(std::optional<Upstream> next) = 0;
    virtual std::optional<Upstream> current() const = 0;
};

class StableEndpoint final : public UpstreamSwitch {
public:
    explicit StableEndpoint(EndpointOptions options);
    ~StableEndpoint();  // stops
    StableEndpoint(const StableEndpoint&) = delete;
    StableEndpoint& operator=(const StableEndpoint&) = delete;

    // Binds the address: from then on clients' connections wait in the kernel's queue (no refusal,
    // no 503) until start() accepts them. Throws std::runtime_error if it cannot bind.
    void bind();
    // Binds if not yet, and serves on a background thread.
    void start();
    bool accepting() const;
    void stop();
    int port() const;

    // New requests go to `next` (none: 503 with Retry-After) from the moment this is called;
    // returns once the requests admitted to the previous upstream have finished or the drain timed out.
    SwitchResult switch_to(std::optional<Upstream> next) override;
    std::optional<Upstream> current() const override;
    EndpointStats stats() const;

    // The server itself, for feeding it raw bytes (GuardedServer::handle_bytes) in the fuzz target
    // and tests: no socket, the real parsing, admission, routing and handlers.
    http::GuardedServer& http();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::endpoint

