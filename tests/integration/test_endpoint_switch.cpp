// Switching the stable endpoint between two real engines: under steady load (streaming and plain
// requests from four clients) a switch from A to B fails no request, sends every new request to B at
// once, and waits for A's in-flight requests, so A can be killed the moment switch_to returns. A
// drain that times out says what still runs, and those requests still finish.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <thread>

#include "test_endpoint_engines.hpp"

using namespace anvil::test::endpoint;
using anvil::endpoint::EndpointOptions;
using anvil::endpoint::StableEndpoint;
using Clock = std::chrono::steady_clock;

namespace {

// A long stream through the endpoint, on a thread; `started` once its first event arrived.
class LongStream {
public:
    LongStream(int port, int tokens) {
        thread_ = std::thread([this, port, tokens] {
            httplib::Client client("127.0.0.1", port);
            client.set_read_timeout(120, 0);
            httplib::Request req;
            req.method = "POST";
            req.path = "/v1/completions";
            req.body = completion("A long story", tokens, {{"stream", true}, {"ignore_eos", true}}).dump();
            req.headers.emplace("Content-Type", "application/json");
            req.content_receiver = [this](const char* data, size_t size, uint64_t, uint64_t) {
                reply_.body.append(data, size);
                reply_.pieces += 1;
                started_ = true;
                return true;
            };
            httplib::Response res;
            httplib::Error error = httplib::Error::Success;
            if (client.send(req, res, error)) {
                reply_.status = res.status;
                reply_.headers = res.headers;
            } else {
                reply_.error = httplib::to_string(error);
            }
            started_ = true;
        });
    }
    ~LongStream() {
        if (thread_.joinable()) thread_.join();
    }
    void wait_started() const {
        while (!started_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const Reply& finish() {
        thread_.join();
        return reply_;
    }

private:
    std::thread thread_;
    std::atomic<bool> started_{false};
    Reply reply_;
};

struct Record {
    std::string engine;
    bool ok = false;
    bool after_swap = false;  // the endpoint already named B as current when the request was sent
    Clock::time_point end;
    std::string detail;
};

}  // namespace

TEST_CASE("under steady load a switch from engine A to engine B fails no request", "[endpoint]") {
    EngineProcess a("small-a", "f32");  // its own engines: A is killed the moment the switch returns
    EngineProcess b("small-b", "q8");
    StableEndpoint endpoint(EndpointOptions{});
    endpoint.start();
    endpoint.switch_to(a.upstream());
    const std::string b_id = b.upstream().engine_id;

    std::atomic<bool> running{true};
    std::mutex mutex;
    std::vector<Record> records;
    auto client_loop = [&](int id) {
        HttpClient client(endpoint.port());
        for (int i = 0; running; ++i) {
            Record record;
            record.after_swap = endpoint.current()->engine_id == b_id;
            const bool stream = (i + id) % 2 == 0;
            const bool chat = i % 5 == 4;
            json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "Hi " + std::to_string(i)}}}}, {"temperature", 0}}
                             : completion("Client " + std::to_string(id) + " asks " + std::to_string(i), 1);
            body["max_tokens"] = 1 + (i % 4);
            body["stream"] = stream;
            const Reply reply = client.post(chat ? "/v1/chat/completions" : "/v1/completions", body);
            record.end = Clock::now();
            record.engine = reply.header("x-anvil-engine");
            record.ok = reply.status == 200 && (stream ? stream_complete(reply) : reply.parsed().contains("choices"));
            if (!record.ok) record.detail = std::to_string(reply.status) + " " + reply.error + " " + reply.body;
            std::lock_guard<std::mutex> lock(mutex);
            records.push_back(std::move(record));
        }
    };
    auto count = [&] {
        std::lock_guard<std::mutex> lock(mutex);
        return records.size();
    };

    std::vector<std::thread> clients;
    for (int id = 0; id < 4; ++id) clients.emplace_back(client_loop, id);
    const auto warmup_deadline = Clock::now() + std::chrono::seconds(10);
    while (count() < 24 && Clock::now() < warmup_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));

    // A long stream keeps A busy across the switch, so the drain has something to wait for.
    LongStream long_stream(endpoint.port(), 160);
    long_stream.wait_started();
    const auto result = endpoint.switch_to(b.upstream());
    const auto switched = Clock::now();
    // The drain is over: nothing admitted to A still needs it.
    a.kill();

    const std::size_t at_switch = count();
    const auto after_deadline = Clock::now() + std::chrono::seconds(10);
    while (count() < at_switch + 24 && Clock::now() < after_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    running = false;
    for (auto& t : clients) t.join();
    const Reply& long_reply = long_stream.finish();

    INFO(long_reply.status << " " << long_reply.error << " " << long_reply.body.substr(0, 200));
    CHECK(long_reply.status == 200);
    CHECK(stream_complete(long_reply));
    CHECK(long_reply.header("x-anvil-engine") == "engine-small-a");

    std::size_t failed = 0, on_a = 0, on_b = 0, b_during_drain = 0, misrouted = 0;
    std::string first_failure;
    for (const auto& r : records) {
        if (!r.ok && failed++ == 0) first_failure = r.detail;
        if (r.engine == "engine-small-a") ++on_a;
        if (r.engine == b_id) {
            ++on_b;
            if (r.after_swap && r.end < switched) ++b_during_drain;
        }
        if (r.after_swap && r.engine != b_id) ++misrouted;
    }
    INFO(records.size() << " requests: " << on_a << " on A, " << on_b << " on B (" << b_during_drain
                        << " while the drain waited); switch drained " << result.drained << " in " << result.waited.count()
                        << " ms; first failure: " << first_failure);
    CHECK(failed == 0);
    CHECK(misrouted == 0);
    CHECK(on_a >= 24);
    CHECK(on_b >= 24);
    CHECK(on_a + on_b == records.size());
    // New requests went to B while the switch still waited for A's long stream.
    CHECK(b_during_drain >= 1);
    CHECK(result.still_running == 0);
    CHECK(result.drained >= 1);
    const auto stats = endpoint.stats();
    CHECK(stats.upstream_errors == 0);
    CHECK(stats.in_flight == 0);
    CHECK(stats.requests == records.size() + 1);
}

TEST_CASE("a drain that times out reports what still runs, and those requests still finish", "[endpoint]") {
    EndpointOptions options;
    options.drain_timeout = std::chrono::milliseconds(200);
    StableEndpoint endpoint(options);
    endpoint.start();
    endpoint.switch_to(engine_a().upstream());

    LongStream long_stream(endpoint.port(), 200);
    long_stream.wait_started();
    // Stopped, A cannot finish the stream within the drain, however fast this machine is.
    engine_a().signal(SIGSTOP);
    const auto result = endpoint.switch_to(engine_b().upstream());
    engine_a().signal(SIGCONT);
    CHECK(result.still_running == 1);
    CHECK(result.drained == 0);
    CHECK(result.waited >= std::chrono::milliseconds(200));

    HttpClient through(endpoint.port());
    const Reply next = through.post("/v1/completions", completion("Hello", 2));
    CHECK(next.status == 200);
    CHECK(next.header("x-anvil-engine") == "engine-small-q8");

    const Reply& long_reply = long_stream.finish();
    CHECK(long_reply.status == 200);
    CHECK(stream_complete(long_reply));
    CHECK(long_reply.header("x-anvil-engine") == "engine-small-f32");
    CHECK(endpoint.stats().in_flight == 0);
}
