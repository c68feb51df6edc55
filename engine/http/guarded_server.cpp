#include "engine/http/guarded_server.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/http/request_head.hpp"
#include "engine/http/safe_text.hpp"

namespace anvil::http {

namespace {

using Clock = std::chrono::steady_clock;

// What the handlers of one request learn about it from the connection, on the worker's thread.
struct RequestContext {
    bool refused = false;         // answered by admission: its body was never read
    bool body_too_large = false;  // a chunked body ran past the limit
    bool close_after = false;     // httplib could not parse it: its framing cannot be trusted
    bool body_failed = false;     // a body read failed (timed out, cut off): where the body ends is unknown
    bool body_timed_out = false;  // the body did not arrive by its deadline: a 408

    // Whether bytes of this request may still be unread, so that the next bytes on the connection
    // are no request of their own: the connection then closes with the answer.
    bool leaves_bytes_unread() const { return body_too_large || close_after || body_failed; }
};
thread_local RequestContext* current_request = nullptr;

const char* reason_phrase(int status) {
    switch (status) {
        case 400: return "Bad Request";
        case 408: return "Request Timeout";
        case 413: return "Payload Too Large";
        case 431: return "Request Header Fields Too Large";
        case 503: return "Service Unavailable";
        default: return "Error";
    }
}

std::string default_message(int status) {
    switch (status) {
        case 400: return "the request is not valid HTTP/1.1 (request line, headers or body framing)";
        case 401: return "this request needs 'Authorization: Bearer <token>'";
        case 404: return "no such route";
        case 405: return "this route does not take that method";
        case 408: return "the request did not arrive in time";
        case 413: return "the request body is larger than this server accepts";
        case 414: return "the request target is longer than this server accepts";
        case 416: return "the requested range is not satisfiable";
        case 431: return "the request's headers are larger than this server accepts";
        case 500: return "internal error; the server's log has the details";
        default: return "the request failed with status " + std::to_string(status);
    }
}

bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
    pollfd p{fd, events, 0};
    int r;
    do r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & events);
}

// A connection's socket as httplib reads and writes it: the head (already read by the gate) from
// the buffer, then exactly the body the head announces, bounded; fd -1 is an in-memory connection.
class ConnectionStream final : public httplib::Stream {
public:
    ConnectionStream(int fd, std::string& buffer, const RequestHead& head, const ServerLimits& limits, RequestContext& context,
                     Clock::time_point body_deadline = Clock::time_point::max())
        : fd_(fd), buffer_(buffer), head_(head), limits_(limits), context_(context), body_deadline_(body_deadline) {}

    bool is_readable() const override { return pos_ < buffer_.size() || (fd_ >= 0 && wait_for(fd_, POLLIN, limits_.read_timeout)); }

    bool is_writable() const override {
        if (fd_ < 0) return true;
        if (!wait_for(fd_, POLLOUT, limits_.write_timeout)) return false;
        // A client that went away: a streaming handler learns it here and stops generating.
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP))) return false;
        if (p.revents & POLLIN) {
            char byte;
            if (::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
        }
        return true;
    }

    ssize_t read(char* ptr, size_t size) override {
        if (pos_ < head_.length) return take(ptr, std::min(size, head_.length - pos_));
        std::uint64_t allowed = 0;
        switch (head_.framing) {
            case BodyFraming::none: return 0;
            case BodyFraming::length: allowed = head_.content_length - body_read_; break;
            case BodyFraming::chunked:
                if (body_read_ >= limits_.max_body_bytes) {
                    context_.body_too_large = true;
                    return -1;
                }
                allowed = limits_.max_body_bytes - body_read_;
                break;
        }
        if (allowed == 0) return 0;
        size = static_cast<size_t>(std::min<std::uint64_t>(size, allowed));
        if (pos_ < buffer_.size()) {
            const auto n = take(ptr, std::min(size, buffer_.size() - pos_));
            body_read_ += n;
            return n;
        }
        if (fd_ < 0) return 0;
        // The rest of a body that the gate did not read whole: by the body's deadline.
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(body_deadline_ - Clock::now());
        if (left.count() <= 0 || !wait_for(fd_, POLLIN, std::min(limits_.read_timeout, left))) {
            context_.body_failed = true;
            context_.body_timed_out = left <= limits_.read_timeout;  // the deadline, not the pause between reads, ran out
            return -1;
        }
        const ssize_t n = ::recv(fd_, ptr, size, 0);
        if (n > 0) body_read_ += n;
        else context_.body_failed = true;
        return n;
    }

    ssize_t write(const char* ptr, size_t size) override {
        if (fd_ < 0) {
            output_.append(ptr, size);
            return static_cast<ssize_t>(size);
        }
        if (!wait_for(fd_, POLLOUT, limits_.write_timeout)) return -1;
        return ::send(fd_, ptr, size, MSG_NOSIGNAL);
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(false, ip, port); }
    void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(true, ip, port); }
    socket_t socket() const override { return fd_; }

    // Whether the connection is positioned at the next request: the whole body was read.
    bool body_consumed() const {
        if (context_.refused) return head_.framing == BodyFraming::none || (head_.framing == BodyFraming::length && head_.content_length == 0);
        switch (head_.framing) {
            case BodyFraming::none: return true;
            case BodyFraming::length: return body_read_ == head_.content_length;
            case BodyFraming::chunked: return body_read_ > 0;  // httplib reads a chunked body to its end or fails
        }
        return false;
    }
    std::size_t position() const { return pos_; }
    const std::string& output() const { return output_; }

private:
    ssize_t take(char* ptr, std::size_t n) {
        std::memcpy(ptr, buffer_.data() + pos_, n);
        pos_ += n;
        return static_cast<ssize_t>(n);
    }

    void address_of(bool local, std::string& ip, int& port) const {
        ip = "127.0.0.1";
        port = 0;
        if (fd_ < 0) return;
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        const int r = local ? ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) : ::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
        if (r != 0) return;
        char text[INET6_ADDRSTRLEN] = {};
        if (addr.ss_family == AF_INET) {
            const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
            ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
            port = ntohs(a->sin_port);
        } else if (addr.ss_family == AF_INET6) {
            const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
            ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
            port = ntohs(a->sin6_port);
        }
        ip = text;
    }

    int fd_;
    std::string& buffer_;
    const RequestHead& head_;
    const ServerLimits& limits_;
    RequestContext& context_;
    Clock::time_point body_deadline_;
    std::size_t pos_ = 0;
    std::uint64_t body_read_ = 0;
    std::string output_;
};

struct Connection {
    int fd = -1;
    std::string buffer;  // bytes read and not yet processed
    Clock::time_point since;
    Clock::time_point deadline;
    // While the gate reads an admitted request's body: where the head ends, where the request ends
    // (Content-Length) or the scan of its chunks, and the body's bytes counted against the gate's budget.
    bool reading_body = false;
    std::size_t head_length = 0;
    std::size_t request_end = 0;
    std::optional<ChunkedBodyScan> chunks;
    std::size_t counted = 0;
    Clock::time_point body_deadline = Clock::time_point::max();  // for the gate, then for the worker that reads the rest
};

// Whether `buffer` starts with a whole request, its body included, that a worker may serve at once.
bool whole_request(const std::string& buffer, const ServerLimits& limits) {
    const RequestHead head = parse_request_head(buffer);
    if (head.state != RequestHead::State::complete || head.length > limits.max_head_bytes) return false;
    switch (head.framing) {
        case BodyFraming::none: return true;
        case BodyFraming::length: return buffer.size() - head.length >= head.content_length;
        case BodyFraming::chunked: {
            ChunkedBodyScan scan(limits.max_head_bytes);
            return scan.feed(std::string_view(buffer).substr(head.length)) == ChunkedBodyScan::State::complete;
        }
    }
    return false;
}

std::string slow_body_message(const ServerLimits& limits) {
    return "the request's body did not arrive in time (a body may take " + std::to_string(limits.head_deadline.count()) +
           " ms plus its size at " + std::to_string(limits.min_body_bytes_per_second) + " bytes a second)";
}

// When a body of `bytes` must have arrived, from `now`.
Clock::time_point body_deadline(Clock::time_point now, std::uint64_t bytes, const ServerLimits& limits) {
    const auto rate = std::max<std::size_t>(limits.min_body_bytes_per_second, 1);
    // A body over the limit is refused unread; counting it at the limit keeps the sum in range.
    bytes = std::min<std::uint64_t>(bytes, limits.max_body_bytes);
    return now + limits.head_deadline + std::chrono::milliseconds(bytes * 1000 / rate);
}

// Enough descriptors for the connection limit: the soft limit is often 1024, the hard one far more.
void raise_descriptor_limit(std::size_t connections) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
    const rlim_t wanted = std::min<rlim_t>(limit.rlim_max, static_cast<rlim_t>(connections) + 1024);
    if (limit.rlim_cur >= wanted) return;
    limit.rlim_cur = wanted;
    ::setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

// The task queue httplib's accept loop hands each connection to: the accept thread only registers
// it; the gate thread reads heads; workers run requests.
struct GuardedServer::Gate final : httplib::TaskQueue {
    explicit Gate(GuardedServer& server) : server_(server), limits_(server.limits_) {
        raise_descriptor_limit(limits_.max_connections);
        epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
        wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (epoll_ < 0 || wake_ < 0) throw std::runtime_error(std::string("cannot set up the connection gate: ") + std::strerror(errno));
        epoll_event e{};
        e.events = EPOLLIN;
        e.data.fd = wake_;
        ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &e);
        gate_thread_ = std::thread([this] { run_gate(); });
        for (int i = 0; i < std::max(limits_.workers, 1); ++i) workers_.emplace_back([this] { run_worker(); });
    }

    ~Gate() override {
        shutdown();
        ::close(epoll_);
        ::close(wake_);
    }

    // httplib's accept loop calls this with a closure that calls process_and_close_socket(sock).
    void enqueue(std::function<void()> fn) override { fn(); }

    void shutdown() override {
        if (stopping_.exchange(true)) return;
        server_.gate_ = nullptr;
        wake();
        // A worker between its predicate check (under mutex_) and its wait would miss a notify
        // sent now: taking mutex_ once orders the notify after its wait has begun.
        { std::lock_guard lock(mutex_); }
        ready_cv_.notify_all();
        if (gate_thread_.joinable()) gate_thread_.join();
        for (auto& w : workers_)
            if (w.joinable()) w.join();
        std::lock_guard lock(mutex_);
        for (auto& c : incoming_) close_connection(c);
        for (auto& c : ready_) close_connection(c);
        incoming_.clear();
        ready_.clear();
    }

    void admit(int fd) {
        ++open_;
        const auto now = Clock::now();
        Connection c;
        c.fd = fd;
        c.since = now;
        c.deadline = now + limits_.head_deadline;
        pass_to_gate(std::move(c));
    }

private:
    void wake() {
        const std::uint64_t one = 1;
        [[maybe_unused]] auto r = ::write(wake_, &one, sizeof one);
    }

    void pass_to_gate(Connection c) {
        {
            std::lock_guard lock(mutex_);
            if (stopping_) return close_connection(c);
            incoming_.push_back(std::move(c));
        }
        wake();
    }

    void close_connection(Connection& c) {
        if (c.fd < 0) return;
        ::close(c.fd);  // also leaves the epoll set
        c.fd = -1;
        --open_;
    }

    // A short answer the gate gives itself, best effort: the connection closes after it.
    void refuse(Connection& c, int status, const std::string& message) {
        const std::string body = server_.error_body_(status, message);
        const std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                                     "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                                     "\r\nConnection: close\r\n\r\n" + body;
        [[maybe_unused]] auto sent = ::send(c.fd, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        close_connection(c);
    }

    // ---- the gate thread

    void run_gate() {
        std::vector<epoll_event> events(256);
        while (!stopping_) {
            const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), next_timeout_ms());
            for (int i = 0; i < n; ++i) {
                const int fd = events[i].data.fd;
                if (fd == wake_) {
                    std::uint64_t count;
                    while (::read(wake_, &count, sizeof count) > 0) {
                    }
                    take_incoming();
                } else if (auto it = waiting_.find(fd); it != waiting_.end()) {
                    read_head(it);
                }
            }
            expire(Clock::now());
        }
        for (auto& [fd, c] : waiting_) close_connection(c);
        waiting_.clear();
    }

    int next_timeout_ms() const {
        auto next = Clock::now() + std::chrono::seconds(1);
        for (const auto& [fd, c] : waiting_) next = std::min(next, c.deadline);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
        return static_cast<int>(std::clamp<long long>(ms, 0, 1000));
    }

    void take_incoming() {
        std::vector<Connection> batch;
        {
            std::lock_guard lock(mutex_);
            batch.swap(incoming_);
        }
        for (auto& c : batch) {
            // A connection handed back may already hold its next request (pipelined, or read by the worker).
            if (!c.buffer.empty() && judge_head(c)) continue;
            epoll_event e{};
            e.events = EPOLLIN | EPOLLRDHUP;
            e.data.fd = c.fd;
            if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &e) != 0) {
                close_connection(c);
                continue;
            }
            const int fd = c.fd;
            waiting_.emplace(fd, std::move(c));
        }
        // Over the limit: the connections that have waited longest for a head make room, since a
        // new client is likelier to be a real one than a socket that has sent nothing useful.
        while (open_ > limits_.max_connections && !waiting_.empty()) {
            // A body under way is real work a client sends: heads and idle connections go first.
            auto oldest = std::min_element(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
                return std::pair(a.second.reading_body, a.second.since) < std::pair(b.second.reading_body, b.second.since);
            });
            release_body(oldest->second);
            close_connection(oldest->second);
            waiting_.erase(oldest);
        }
    }

    void read_head(std::unordered_map<int, Connection>::iterator it) {
        Connection& c = it->second;
        char chunk[16384];
        for (;;) {
            // A head is read to its limit; a body to its end (its length known), or to the most a
            // chunked body may take (its scan then says where it ends, or the worker answers 413).
            const std::size_t cap = !c.reading_body ? limits_.max_head_bytes + 1
                                    : c.request_end ? c.request_end
                                                    : c.head_length + limits_.max_body_bytes + limits_.max_head_bytes;
            if (c.buffer.size() >= cap) break;
            const ssize_t n = ::recv(c.fd, chunk, std::min(sizeof chunk, cap - c.buffer.size()), MSG_DONTWAIT);
            if (n > 0) {
                if (c.buffer.empty()) c.deadline = std::min(c.deadline, Clock::now() + limits_.head_deadline);
                c.buffer.append(chunk, static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (n < 0 && errno == EINTR) continue;
            release_body(c);
            close_connection(c);  // closed by the client, or an error
            waiting_.erase(it);
            return;
        }
        Connection moved = std::move(c);
        waiting_.erase(it);
        if (moved.reading_body ? judge_body(moved) : judge_head(moved)) return;
        const int fd = moved.fd;
        waiting_.emplace(fd, std::move(moved));
    }

    // Hands a complete head to the workers (or starts reading its body), refuses a bad one, or
    // returns false: wait for more.
    bool judge_head(Connection& c) {
        const RequestHead head = parse_request_head(c.buffer);
        const bool too_large = head.state == RequestHead::State::complete ? head.length > limits_.max_head_bytes : c.buffer.size() > limits_.max_head_bytes;
        if (too_large) {
            refuse(c, 431, "the request line and headers are over " + std::to_string(limits_.max_head_bytes) + " bytes");
            return true;
        }
        if (head.state == RequestHead::State::complete) {
            const auto now = Clock::now();
            c.body_deadline = head.framing == BodyFraming::none ? Clock::time_point::max()
                                                                : body_deadline(now, head.framing == BodyFraming::length ? head.content_length : limits_.max_body_bytes, limits_);
            if (!gate_reads_body(head)) {
                hand_to_worker(c);
                return true;
            }
            std::size_t head_length = head.length;
            if (head.expect_continue) {
                // The client waits to be told: the gate tells it and reads the body itself, so that
                // such clients hold no worker either. The field goes, so the worker sends no second 100.
                static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
                [[maybe_unused]] auto sent = ::send(c.fd, kContinue.data(), kContinue.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
                c.buffer.erase(head.expect_at, head.expect_length);
                head_length -= head.expect_length;
            }
            c.reading_body = true;
            c.head_length = head_length;
            if (head.framing == BodyFraming::length) c.request_end = head_length + static_cast<std::size_t>(head.content_length);
            else c.chunks.emplace(limits_.max_head_bytes);
            c.deadline = c.body_deadline;
            return judge_body(c);
        }
        if (head.state == RequestHead::State::invalid) {
            refuse(c, 400, head.error);
            return true;
        }
        return false;
    }

    // Whether the gate reads this request's body before a worker takes it: an admitted request with
    // a body within the limit (told to go on, if it waits for a 100 Continue). The rest (refused,
    // over the limit) go to a worker at once, which answers before any body byte is read.
    bool gate_reads_body(const RequestHead& head) const {
        if (head.framing == BodyFraming::none) return false;
        if (head.framing == BodyFraming::length && (head.content_length == 0 || head.content_length > limits_.max_body_bytes)) return false;
        return admitted(head);
    }

    bool admitted(const RequestHead& head) const {
        if (!server_.admit_ && !server_.origin_policy()) return true;
        httplib::Request req;
        req.method = head.method;
        req.target = head.target;
        req.path = head.target.substr(0, head.target.find('?'));
        for (const auto& [name, value] : head.fields) req.headers.emplace(name, value);
        try {
            return !server_.refusal_for(req);
        } catch (...) {
            return false;  // the worker runs it again and answers
        }
    }

    // A body the gate is reading: hands the request on once it is whole (or once it is over the
    // gate's budget, for a worker to read the rest), or returns false: wait for more.
    bool judge_body(Connection& c) {
        const std::size_t body = c.buffer.size() - std::min(c.buffer.size(), c.head_length);
        body_bytes_ += body - c.counted;
        c.counted = body;
        bool whole = false;
        if (c.request_end) {
            whole = c.buffer.size() >= c.request_end;
        } else {
            const auto state = c.chunks->feed(std::string_view(c.buffer).substr(c.head_length));
            // Complete, or framing the worker's parser refuses, or data over the limit (a 413 there).
            whole = state != ChunkedBodyScan::State::more || c.chunks->data_bytes() > limits_.max_body_bytes ||
                    body >= limits_.max_body_bytes + limits_.max_head_bytes;
        }
        if (!whole && body_bytes_ <= limits_.max_gate_body_bytes) return false;
        hand_to_worker(c);
        return true;
    }

    void release_body(Connection& c) {
        body_bytes_ -= c.counted;
        c.counted = 0;
        c.reading_body = false;
        c.chunks.reset();
        c.request_end = 0;
    }

    // Queues a request for the workers; the bytes of its body stay counted until one takes it, so
    // whole bodies waiting behind busy workers are bounded by the same budget.
    void hand_to_worker(Connection& c) {
        c.reading_body = false;
        c.chunks.reset();
        c.request_end = 0;
        if (c.fd >= 0) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
        {
            std::lock_guard lock(mutex_);
            ready_.push_back(std::move(c));
        }
        ready_cv_.notify_one();
    }

    void expire(Clock::time_point now) {
        for (auto it = waiting_.begin(); it != waiting_.end();) {
            Connection& c = it->second;
            if (c.deadline > now) {
                ++it;
                continue;
            }
            if (c.reading_body) {
                release_body(c);
                refuse(c, 408, slow_body_message(limits_));
            } else if (c.buffer.empty()) {
                close_connection(c);  // an idle connection: no one to answer
            } else {
                refuse(c, 408, "the request's head did not arrive within " + std::to_string(limits_.head_deadline.count()) + " ms");
            }
            it = waiting_.erase(it);
        }
    }

    // ---- workers

    void run_worker() {
        for (;;) {
            Connection c;
            {
                std::unique_lock lock(mutex_);
                ready_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
                if (ready_.empty()) return;
                c = std::move(ready_.front());
                ready_.pop_front();
            }
            body_bytes_ -= c.counted;
            c.counted = 0;
            serve(std::move(c));
        }
    }

    void serve(Connection c) {
        for (;;) {
            const RequestHead head = parse_request_head(c.buffer);
            RequestContext context;
            ConnectionStream stream(c.fd, c.buffer, head, limits_, context, c.body_deadline);
            bool closed = false;
            current_request = &context;
            const bool ok = server_.process_one(stream, stopping_, closed);
            current_request = nullptr;
            if (!ok || closed || stopping_ || context.leaves_bytes_unread() || !stream.body_consumed()) return close_connection(c);
            c.buffer.erase(0, stream.position());
            c.body_deadline = Clock::time_point::max();
            // A client that sends its next request as soon as it has read the answer is served on
            // this thread when the request is here whole: no trip through the gate for back-to-back
            // requests. One still arriving goes through the gate, which reads its body first.
            if (c.buffer.empty() && wait_for(c.fd, POLLIN, std::chrono::milliseconds(1))) {
                char chunk[16384];
                const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
                if (n <= 0) return close_connection(c);
                c.buffer.append(chunk, static_cast<std::size_t>(n));
            }
            if (whole_request(c.buffer, limits_)) continue;
            const auto now = Clock::now();
            c.since = now;
            c.deadline = now + (c.buffer.empty() ? limits_.idle_timeout : limits_.head_deadline);
            c.body_deadline = Clock::time_point::max();
            return pass_to_gate(std::move(c));
        }
    }

    GuardedServer& server_;
    const ServerLimits& limits_;
    int epoll_ = -1, wake_ = -1;
    std::atomic<bool> stopping_{false};
    std::atomic<std::size_t> open_{0};
    // Body bytes held in memory for requests not yet taken by a worker: while they arrive (the gate
    // counts them) and while they wait in ready_ (the worker that takes one uncounts it).
    std::atomic<std::size_t> body_bytes_{0};
    std::mutex mutex_;
    std::condition_variable ready_cv_;
    std::vector<Connection> incoming_;  // new or handed back: the gate registers them
    std::deque<Connection> ready_;      // a complete head: waiting for a worker
    std::unordered_map<int, Connection> waiting_;  // the gate thread's own
    std::thread gate_thread_;
    std::vector<std::thread> workers_;
};

bool has_bearer_token(const httplib::Request& req, const std::string& secret) {
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view scheme = "Bearer ";
    if (secret.empty() || auth.size() <= scheme.size() || auth.compare(0, scheme.size(), scheme) != 0) return false;
    const std::string_view given = std::string_view(auth).substr(scheme.size());
    // Every byte of the secret is compared, whatever the given token's length.
    unsigned char diff = given.size() == secret.size() ? 0 : 1;
    for (std::size_t i = 0; i < secret.size(); ++i) diff |= static_cast<unsigned char>(secret[i] ^ given[i % given.size()]);
    return diff == 0;
}

GuardedServer::GuardedServer(ServerLimits limits, ErrorBody error_body) : limits_(limits), error_body_(std::move(error_body)) {
    new_task_queue = [this] {
        auto* gate = new Gate(*this);
        gate_ = gate;
        return gate;
    };
    // httplib's own timeouts apply to its SocketStream, which the workers do not use; these two
    // still show in its Keep-Alive response header and its own body check.
    set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(limits_.idle_timeout).count());
    set_keep_alive_max_count(100000);
    set_payload_max_length(limits_.max_body_bytes);

    auto check = [this](const httplib::Request& req, httplib::Response& res) {
        // Who asks first: a client without the token learns nothing of the limits.
        std::optional<Refusal> refusal = refusal_for(req);
        if (!refusal && req.has_header("Content-Length")) {
            // The gate has checked it is a number.
            const std::string text = req.get_header_value("Content-Length");
            std::uint64_t length = 0;
            std::from_chars(text.data(), text.data() + text.size(), length);
            if (length > limits_.max_body_bytes)
                refusal = Refusal{413, "the request body is " + std::to_string(length) + " bytes; this server takes at most " +
                                           std::to_string(limits_.max_body_bytes)};
        }
        if (!refusal) return false;
        if (current_request) current_request->refused = true;
        res.status = refusal->status;
        res.set_header("Connection", "close");
        res.set_content(error_body_(refusal->status, refusal->message), "application/json");
        return true;
    };
    Server::set_pre_routing_handler([this, check](const httplib::Request& req, httplib::Response& res) {
        if (check(req, res)) return HandlerResponse::Handled;
        // A configured cross origin's preflight: what it may send, answered here for every route.
        const auto policy = origin_policy();
        if (req.method == "OPTIONS" && policy && req.has_header("Origin") &&
            judge_origin(*policy, machine_names_, req.get_header_value("Host"), req.get_header_value("Origin")).cross_origin) {
            res.status = 204;
            res.set_header("Access-Control-Allow-Origin", req.get_header_value("Origin"));
            res.set_header("Vary", "Origin");
            res.set_header("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, DELETE, OPTIONS");
            // What the page says it will send (an SDK's own headers among them), or the usual ones.
            const std::string asked = req.get_header_value("Access-Control-Request-Headers");
            res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, Accept" : asked);
            res.set_header("Access-Control-Max-Age", "600");
            return HandlerResponse::Handled;
        }
        return HandlerResponse::Unhandled;
    });
    // A configured cross origin may read what it asked for.
    set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        const auto policy = origin_policy();
        if (!policy || !req.has_header("Origin") || res.has_header("Access-Control-Allow-Origin")) return;
        const std::string origin = req.get_header_value("Origin");
        if (!judge_origin(*policy, machine_names_, req.get_header_value("Host"), origin).cross_origin) return;
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
    });
    // A client that waits for 100 Continue learns of a refusal before it sends the body.
    set_expect_100_continue_handler([check](const httplib::Request& req, httplib::Response& res) { return check(req, res) ? res.status : 100; });
    set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string what = "an exception that is no std::exception";
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        spdlog::error("{} {}: {}", valid_utf8(req.method), valid_utf8(req.path), valid_utf8(what));
        res.status = 500;
        res.headers.clear();
        res.set_content(error_body_(500, default_message(500)), "application/json");
    });
    set_error_handler(nullptr);
}

GuardedServer::~GuardedServer() = default;

bool GuardedServer::bind_to_port(const std::string& host, int port, int socket_flags) {
    if (!Server::bind_to_port(host, port, socket_flags)) return false;
    ::listen(svr_sock_, SOMAXCONN);  // Linux takes a second listen() as a new backlog
    return true;
}

int GuardedServer::bind_to_any_port(const std::string& host, int socket_flags) {
    const int port = Server::bind_to_any_port(host, socket_flags);
    if (port > 0) ::listen(svr_sock_, SOMAXCONN);
    return port;
}

void GuardedServer::set_admission(Admission admit) { admit_ = std::move(admit); }

void GuardedServer::set_origin_policy(OriginPolicy policy) {
    auto next = std::make_shared<const OriginPolicy>(std::move(policy));
    std::lock_guard lock(policy_mutex_);
    if (!origin_policy_) machine_names_ = machine_names();  // before any request reads it
    origin_policy_ = std::move(next);
}

std::shared_ptr<const OriginPolicy> GuardedServer::origin_policy() const {
    std::lock_guard lock(policy_mutex_);
    return origin_policy_;
}

std::optional<Refusal> GuardedServer::refusal_for(const httplib::Request& req) const {
    if (const auto policy = origin_policy()) {
        const auto verdict = judge_origin(*policy, machine_names_, req.get_header_value("Host"), req.get_header_value("Origin"));
        if (!verdict.allowed) return Refusal{403, verdict.refusal};
        // A browser's preflight carries no credentials: it is answered (pre-routing) without them.
        if (verdict.cross_origin && req.method == "OPTIONS") return std::nullopt;
    }
    return admit_ ? admit_(req) : std::nullopt;
}

GuardedServer& GuardedServer::set_error_handler(HandlerWithResponse handler) {
    error_handler_ = std::move(handler);
    Server::set_error_handler(HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (current_request && current_request->body_timed_out) {
            res.status = 408;
            res.set_header("Connection", "close");
            res.set_content(error_body_(408, slow_body_message(limits_)), "application/json");
            return HandlerResponse::Handled;
        }
        if (current_request && current_request->body_too_large) {
            res.status = 413;
            res.set_header("Connection", "close");
            res.set_content(error_body_(413, "the request body is over " + std::to_string(limits_.max_body_bytes) + " bytes"), "application/json");
            return HandlerResponse::Handled;
        }
        // A bodiless 400 or 414 is httplib's own parser refusing the request: where it ends is
        // unknown, so the connection ends with the answer.
        if (res.body.empty() && (res.status == 400 || res.status == 414)) {
            res.set_header("Connection", "close");
            if (current_request) current_request->close_after = true;
        }
        try {
            if (error_handler_ && error_handler_(req, res) == HandlerResponse::Handled) return HandlerResponse::Handled;
        } catch (const std::exception& e) {
            spdlog::error("error handler for {} {}: {}", valid_utf8(req.method), valid_utf8(req.path), valid_utf8(e.what()));
            res.body.clear();
        }
        if (res.body.empty()) res.set_content(error_body_(res.status, default_message(res.status)), "application/json");
        return HandlerResponse::Handled;
    }));
    return *this;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
    if (!gate_) {
        ::close(sock);
        return false;
    }
    gate_->admit(sock);
    return true;
}

bool GuardedServer::process_one(httplib::Stream& stream, bool closing, bool& connection_closed) {
    try {
        return process_request(stream, closing, connection_closed, nullptr);
    } catch (const std::exception& e) {
        // Only a failure outside any handler gets here (handlers' exceptions become 500s).
        spdlog::error("HTTP request processing failed: {}", valid_utf8(e.what()));
    } catch (...) {
        spdlog::error("HTTP request processing failed with an exception that is no std::exception");
    }
    return false;
}

std::string GuardedServer::handle_bytes(const std::string& request) {
    std::string buffer = request;
    std::string responses;
    while (!buffer.empty()) {
        const RequestHead head = parse_request_head(buffer);
        if (head.state == RequestHead::State::incomplete) break;
        if (head.state == RequestHead::State::invalid) {
            const std::string body = error_body_(400, head.error);
            return responses + "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                   "\r\nConnection: close\r\n\r\n" + body;
        }
        RequestContext context;
        ConnectionStream stream(-1, buffer, head, limits_, context);
        bool closed = false;
        current_request = &context;
        const bool ok = process_one(stream, false, closed);
        current_request = nullptr;
        responses += stream.output();
        if (!ok || closed || context.leaves_bytes_unread() || !stream.body_consumed()) break;
        buffer.erase(0, stream.position());
    }
    return responses;
}

}  // namespace anvil::http
