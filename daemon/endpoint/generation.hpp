// One upstream as the stable endpoint admits requests to it: the engine's address and identity, the
// requests in flight on it (a switch drains them), and its pooled keep-alive connections. A switch
// replaces the current Generation; the old one lives until its last admitted request lets go.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "daemon/endpoint/stable_endpoint.hpp"

namespace anvil::endpoint {

// Why a request to the upstream produced no complete response.
enum class Failure { none, unreachable, timeout, reset, cancelled, closed };

struct SendOutcome {
    Failure failure = Failure::none;
    std::string detail;   // httplib's error name, for logs and error messages
    bool responded = false;  // the upstream's status line and headers arrived
};

// Lets another thread abort one request in progress: cancel() shuts the socket of the connection it
// runs on, so a read blocked on a silent upstream returns at once instead of at the read timeout.
class CancelSlot {
public:
    void cancel();
    bool cancelled() const;
    void attach(httplib::Client* client);  // nullptr detaches before the client is reused or freed

private:
    mutable std::mutex mutex_;
    httplib::Client* client_ = nullptr;
    bool cancelled_ = false;
};

// Keep-alive connections to one upstream. An httplib::Client runs one request at a time, so each
// request borrows a client of its own and returns it afterwards, socket still open.
class ClientPool {
public:
    ClientPool(std::string host, int port, std::chrono::milliseconds timeout, std::size_t max_idle);
    ~ClientPool();
    ClientPool(const ClientPool&) = delete;
    ClientPool& operator=(const ClientPool&) = delete;

    // nullptr once closed.
    std::unique_ptr<httplib::Client> acquire(bool fresh);
    // Keeps the client for the next request if `reusable`, else closes it.
    void give_back(std::unique_ptr<httplib::Client> client, bool reusable);
    // Aborts the requests in progress and refuses new ones (the endpoint is stopping).
    void close();

private:
    std::unique_ptr<httplib::Client> make() const;

    const std::string host_;
    const int port_;
    const std::chrono::milliseconds timeout_;
    const std::size_t max_idle_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<httplib::Client>> idle_;
    std::unordered_set<httplib::Client*> busy_;
    bool closed_ = false;
};

class Generation {
public:
    Generation(Upstream upstream, const EndpointOptions& options);

    const Upstream& upstream() const { return upstream_; }
    std::chrono::system_clock::time_point since() const { return since_; }

    // Sends `request` upstream. `on_response` sees the status and headers once, `on_data` each piece
    // of the body as it arrives; either returns false to abort. A pooled connection that turns out
    // dead before any byte of the response (the upstream closed it while idle) is retried once on a
    // fresh connection, so a keep-alive race never becomes a client-visible error.
    SendOutcome send(httplib::Request& request, const std::function<bool(const httplib::Response&)>& on_response,
                     const std::function<bool(const char*, std::size_t)>& on_data, CancelSlot* slot);

    void close() { pool_.close(); }

    // Admission bookkeeping, used through Admission.
    void enter() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
    void leave();
    std::size_t in_flight() const { return in_flight_.load(); }
    // Waits until nothing admitted here is in flight, or until `deadline`; returns what still runs.
    std::size_t wait_idle(std::chrono::steady_clock::time_point deadline);

private:
    const Upstream upstream_;
    const std::chrono::milliseconds timeout_;
    const std::chrono::system_clock::time_point since_;
    ClientPool pool_;
    std::atomic<std::size_t> in_flight_{0};
    std::mutex idle_mutex_;
    std::condition_variable idle_;
};

// A request's hold on the generation it was admitted to; the switch that replaced that generation
// waits for every hold to be released.
class Admission {
public:
    Admission() = default;
    Admission(std::shared_ptr<Generation> generation, std::atomic<std::uint64_t>* in_flight_total);
    ~Admission() { release(); }
    Admission(Admission&& other) noexcept;
    Admission& operator=(Admission&& other) noexcept;
    Admission(const Admission&) = delete;
    Admission& operator=(const Admission&) = delete;

    explicit operator bool() const { return generation_ != nullptr; }
    Generation& generation() const { return *generation_; }
    void release();

private:
    std::shared_ptr<Generation> generation_;
    std::atomic<std::uint64_t>* in_flight_total_ = nullptr;
};

}  // namespace anvil::endpoint
