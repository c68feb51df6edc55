// Generation, its connection pool and the admission hold: see generation.hpp.
#include "daemon/endpoint/generation.hpp"

#include <algorithm>
#include <utility>

namespace anvil::endpoint {

using Clock = std::chrono::steady_clock;

void CancelSlot::cancel() {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    // Shutting the socket down is httplib's one thread-safe way to interrupt a request in progress.
    if (client_) client_->stop();
}

bool CancelSlot::cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
}

void CancelSlot::attach(httplib::Client* client) {
    std::lock_guard<std::mutex> lock(mutex_);
    client_ = client;
}

ClientPool::ClientPool(std::string host, int port, std::chrono::milliseconds timeout, std::size_t max_idle)
    : host_(std::move(host)), port_(port), timeout_(timeout), max_idle_(max_idle) {}

ClientPool::~ClientPool() { close(); }

std::unique_ptr<httplib::Client> ClientPool::make() const {
    auto client = std::make_unique<httplib::Client>(host_, port_);
    client->set_keep_alive(true);
    // Small requests and SSE events must not wait for Nagle's algorithm.
    client->set_tcp_nodelay(true);
    // Bodies pass through byte for byte (requests ask for identity encoding, see the endpoint).
    client->set_decompress(false);
    // A local engine accepts at once or not at all; the read timeout is the one that waits for work.
    client->set_connection_timeout(std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5)));
    client->set_read_timeout(timeout_);
    client->set_write_timeout(timeout_);
    return client;
}

std::unique_ptr<httplib::Client> ClientPool::acquire(bool fresh) {
    std::unique_ptr<httplib::Client> client;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (closed_) return nullptr;
        if (!fresh && !idle_.empty()) {
            client = std::move(idle_.back());
            idle_.pop_back();
        }
    }
    if (!client) client = make();
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return nullptr;
    busy_.insert(client.get());
    return client;
}

void ClientPool::give_back(std::unique_ptr<httplib::Client> client, bool reusable) {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_.erase(client.get());
    if (reusable && !closed_ && idle_.size() < max_idle_) idle_.push_back(std::move(client));
    // Otherwise the client closes its socket as it goes out of scope.
}

void ClientPool::close() {
    std::vector<std::unique_ptr<httplib::Client>> idle;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        closed_ = true;
        for (httplib::Client* client : busy_) client->stop();
        idle.swap(idle_);
    }
}

Generation::Generation(Upstream upstream, const EndpointOptions& options)
    : upstream_(std::move(upstream)),
      timeout_(options.upstream_timeout),
      since_(std::chrono::system_clock::now()),
      pool_(upstream_.host, upstream_.port, options.upstream_timeout, std::size_t(std::max(options.threads, 1))) {}

SendOutcome Generation::send(httplib::Request& request, const std::function<bool(const httplib::Response&)>& on_response,
                             const std::function<bool(const char*, std::size_t)>& on_data, CancelSlot* slot) {
    SendOutcome outcome;
    for (int attempt = 0;; ++attempt) {
        if (slot && slot->cancelled()) {
            outcome.failure = Failure::cancelled;
            return outcome;
        }
        auto client = pool_.acquire(attempt > 0);
        if (!client) {
            outcome.failure = Failure::closed;
            outcome.detail = "the endpoint is stopping";
            return outcome;
        }
        const bool reused = client->is_socket_open() != 0;
        bool responded = false, aborted = false;
        const auto started = Clock::now();
        auto last_byte = started;
        request.response_handler = [&](const httplib::Response& response) {
            responded = true;
            last_byte = Clock::now();
            aborted = !on_response(response);
            return !aborted;
        };
        request.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
            last_byte = Clock::now();
            aborted = !on_data(data, size);
            return !aborted;
        };
        if (slot) {
            slot->attach(client.get());
            // A cancel that came before the attach had no socket to shut: honour it here.
            if (slot->cancelled()) {
                slot->attach(nullptr);
                pool_.give_back(std::move(client), true);
                outcome.failure = Failure::cancelled;
                return outcome;
            }
        }
        httplib::Response response;
        httplib::Error error = httplib::Error::Success;
        const bool ok = client->send(request, response, error);
        if (slot) slot->attach(nullptr);
        request.response_handler = nullptr;
        request.content_receiver = nullptr;
        pool_.give_back(std::move(client), ok);
        outcome.responded = responded;
        if (ok) return outcome;

        outcome.detail = httplib::to_string(error);
        if (aborted || error == httplib::Error::Canceled || (slot && slot->cancelled())) {
            outcome.failure = Failure::cancelled;
            return outcome;
        }
        const auto quiet = Clock::now() - last_byte;
        // An idle keep-alive connection the upstream closed fails fast on write or read, before any
        // response; a fresh connection answers. A slow failure means the upstream had the request.
        if (attempt == 0 && reused && !responded && Clock::now() - started < timeout_ / 2 &&
            (error == httplib::Error::Read || error == httplib::Error::Write))
            continue;
        switch (error) {
            case httplib::Error::Connection: outcome.failure = Failure::unreachable; break;
            case httplib::Error::ConnectionTimeout: outcome.failure = Failure::timeout; break;
            case httplib::Error::Read:
            case httplib::Error::Write:
                // httplib reports a read timeout as a read error; the silence tells them apart.
                outcome.failure = quiet + std::chrono::milliseconds(50) >= timeout_ ? Failure::timeout : Failure::reset;
                break;
            default: outcome.failure = Failure::reset; break;
        }
        return outcome;
    }
}

void Generation::leave() {
    if (in_flight_.fetch_sub(1) == 1) {
        // Taking the mutex orders this notify after a waiter's predicate check, so it is never lost.
        std::lock_guard<std::mutex> lock(idle_mutex_);
        idle_.notify_all();
    }
}

std::size_t Generation::wait_idle(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(idle_mutex_);
    idle_.wait_until(lock, deadline, [this] { return in_flight_.load() == 0; });
    return in_flight_.load();
}

Admission::Admission(std::shared_ptr<Generation> generation, std::atomic<std::uint64_t>* in_flight_total)
    : generation_(std::move(generation)), in_flight_total_(in_flight_total) {
    generation_->enter();
    if (in_flight_total_) in_flight_total_->fetch_add(1);
}

Admission::Admission(Admission&& other) noexcept
    : generation_(std::move(other.generation_)), in_flight_total_(std::exchange(other.in_flight_total_, nullptr)) {}

Admission& Admission::operator=(Admission&& other) noexcept {
    if (this != &other) {
        release();
        generation_ = std::move(other.generation_);
        in_flight_total_ = std::exchange(other.in_flight_total_, nullptr);
    }
    return *this;
}

void Admission::release() {
    if (!generation_) return;
    if (in_flight_total_) in_flight_total_->fetch_sub(1);
    generation_->leave();
    generation_.reset();
    in_flight_total_ = nullptr;
}

}  // namespace anvil::endpoint
