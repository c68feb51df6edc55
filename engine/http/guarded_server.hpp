// An httplib::Server that a hostile client cannot stop from answering others. httplib gives each
// connection a pool thread from accept to close, so a few hundred idle or trickling sockets hold
// every thread. Here one thread (the gate) watches every connection with epoll until the whole
// head of a request has arrived, within a deadline, and only then hands it to a worker, which runs
// httplib's own request processing (parsing, routing, handlers, streaming responses) on it. Idle
// keep-alive connections go back to the gate. On top:
//  - bodies are bounded before they are read: a Content-Length over the limit is a 413, a chunked
//    body that grows past it ends in a 413, and `admit` (the token check) runs before any body
//    byte is read; a refused request's connection is closed instead of draining what it sent;
//  - an admitted request's body is read by the gate too, within a deadline proportional to its
//    size, so a worker is handed whole requests and a slow body (408 at its deadline) holds none;
//  - any answer that leaves bytes of its request unread closes the connection;
//  - a request with neither Content-Length nor Transfer-Encoding has an empty body (httplib would
//    wait for the client to close: a bodiless POST got a 400 after its read timeout);
//  - no exception leaves a handler: error handlers are guarded and anything else is a 500 with
//    the server's own JSON body and no internal text (httplib put e.what() in a response header).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "engine/http/origin_policy.hpp"

namespace anvil::http {

struct ServerLimits {
    std::size_t max_connections = 2048;      // beyond this, the connection waiting longest for its head is closed
    std::size_t max_head_bytes = 64 * 1024;  // request line and headers: 431 beyond
    std::size_t max_body_bytes = 8u << 20;   // 413 beyond, before the body is read
    std::chrono::milliseconds head_deadline{10'000};    // from a request's first byte (or accept) to its complete head
    std::chrono::milliseconds idle_timeout{60'000};     // a keep-alive connection with no request in it
    std::chrono::milliseconds read_timeout{30'000};     // between two reads of a body
    // A whole body must arrive within head_deadline plus its size at this rate (a chunked body's
    // size counted as max_body_bytes): a slower one gets 408 and its connection closes.
    std::size_t min_body_bytes_per_second = 256 * 1024;
    // Bodies the gate reads while they arrive, all connections together: a worker takes a request
    // only once its body is in, so slow bodies hold none. Past this, a body goes to a worker as it
    // arrives (still under its deadline).
    std::size_t max_gate_body_bytes = 256u << 20;
    std::chrono::milliseconds write_timeout{30'000};    // a client that reads nothing for this long is cut off
    int workers = 16;                                   // requests handled at once; more wait for a worker
};

// Whether `req` carries 'Authorization: Bearer <secret>'. The comparison's time depends on neither
// where a wrong token differs nor its length, so a local client that measures learns nothing.
bool has_bearer_token(const httplib::Request& req, const std::string& secret);

// A response a server gives without running a handler.
struct Refusal {
    int status = 400;
    std::string message;
};

class GuardedServer : public httplib::Server {
public:
    // Renders an error in the server's own JSON shape (OpenAI-style or API-style).
    using ErrorBody = std::function<std::string(int status, const std::string& message)>;
    // Runs when a request's head has been read, before its body: a refusal is answered at once.
    using Admission = std::function<std::optional<Refusal>(const httplib::Request&)>;

    GuardedServer(ServerLimits limits, ErrorBody error_body);
    ~GuardedServer() override;

    // httplib's, with a listen backlog of SOMAXCONN instead of its 5: while the accept thread is not
    // scheduled (a busy machine, a burst of hostile connects) the kernel's queue holds new clients;
    // a full queue drops their SYNs and each waits a 1 s retransmission.
    bool bind_to_port(const std::string& host, int port, int socket_flags = 0);
    int bind_to_any_port(const std::string& host, int socket_flags = 0);

    void set_admission(Admission admit);
    // Answer only the Host names and Origins `policy` allows (engine/http/origin_policy.hpp): a 403
    // before admission and before any body byte; a configured cross origin gets CORS headers. May
    // be called while serving (a reload): each request reads the policy in force when it arrives.
    void set_origin_policy(OriginPolicy policy);
    // httplib's error handler, guarded: if it throws, the client gets a plain JSON error instead of
    // the process ending. Call this, not httplib::Server::set_error_handler.
    GuardedServer& set_error_handler(HandlerWithResponse handler);

    const ServerLimits& limits() const { return limits_; }

    // One raw request through parsing, admission, routing and handlers, on no socket: the raw
    // response. For fuzzing and tests of what a server answers to bytes no client library sends.
    std::string handle_bytes(const std::string& request);

    // The body of an error from this server.
    std::string error_body(int status, const std::string& message) const { return error_body_(status, message); }

    struct Gate;  // the epoll thread, the workers and the connections (guarded_server.cpp)

private:
    bool process_and_close_socket(socket_t sock) override;
    // One request on `stream` (head complete), as the workers and handle_bytes run it.
    friend struct Gate;
    bool process_one(httplib::Stream& stream, bool closing, bool& connection_closed);

    // Why `req` is refused on its head alone (its Host, its Origin, then admission), or nothing.
    std::optional<Refusal> refusal_for(const httplib::Request& req) const;

    ServerLimits limits_;
    ErrorBody error_body_;
    Admission admit_;
    // The policy in force (none: every Host and Origin), swapped whole under policy_mutex_.
    std::shared_ptr<const OriginPolicy> origin_policy() const;
    mutable std::mutex policy_mutex_;
    std::shared_ptr<const OriginPolicy> origin_policy_;
    std::vector<std::string> machine_names_;  // set once, with the first policy
    HandlerWithResponse error_handler_;
    Gate* gate_ = nullptr;  // owned by the task queue httplib holds while it listens
};

}  // namespace anvil::http
