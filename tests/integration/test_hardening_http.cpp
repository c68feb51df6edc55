// Issue 16's HTTP defects, each against a real anvild on a real git registry (and the real engine
// it starts): requests no client library would send, bodies that are too large or unauthenticated,
// and sockets held open to starve the servers. Each test first reproduced the defect on the old
// servers (a dead daemon, a 712 MB peak, a /healthz that never answered).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "daemon_fixture.hpp"
#include "raw_http.hpp"

#ifdef ANVILD

using namespace anvil::test::daemon;
using anvil::test::body_of;
using anvil::test::status_of;

namespace {

// One raw HTTP exchange: the bytes as written, the answer until the server closes.
std::string raw_exchange(int port, const std::string& request, std::chrono::milliseconds timeout = 5000ms) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return "";
    }
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        pollfd p{fd, POLLIN, 0};
        if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
        char buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

long peak_rss_kb(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with("VmHWM:")) return std::stol(line.substr(6));
    return -1;
}

bool alive(const Daemon& d) { return ::kill(d.process->pid(), 0) == 0 && d.get("/healthz").first == 200; }

std::string chat_request() {
    return json{{"model", "anvil-default"}, {"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 4}, {"temperature", 0}}.dump();
}

// A raw loopback connection to `port` that has sent `first_bytes`; the caller closes it.
int open_raw(int port, const std::string& first_bytes) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    if (!first_bytes.empty()) ::send(fd, first_bytes.data(), first_bytes.size(), MSG_NOSIGNAL);
    return fd;
}

// The API's `api_path` and, through the endpoint, its `endpoint_path` and a completion, each
// answered 200 within a second.
void answered_within_a_second(const Daemon& d, const std::string& api_path, const std::string& endpoint_path) {
    auto started = std::chrono::steady_clock::now();
    CHECK(d.get(api_path).first == 200);
    CHECK(std::chrono::steady_clock::now() - started < 1s);
    httplib::Client endpoint("127.0.0.1", d.serve_port);
    endpoint.set_read_timeout(5, 0);
    started = std::chrono::steady_clock::now();
    auto read = endpoint.Get(endpoint_path);
    REQUIRE(read);
    CHECK(read->status == 200);
    auto chat = endpoint.Post("/v1/chat/completions", chat_request(), "application/json");
    REQUIRE(chat);
    CHECK(chat->status == 200);
    CHECK(std::chrono::steady_clock::now() - started < 1s);
}

// How many of `fds` have been answered 408 (or, with `or_closed`, closed without an answer).
int answered_408(const std::vector<int>& fds, bool or_closed) {
    int n = 0;
    for (int fd : fds) {
        pollfd p{fd, POLLIN, 0};
        char buf[512];
        if (::poll(&p, 1, 200) > 0) {
            const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
            if ((or_closed && got == 0) || (got > 12 && std::string(buf, 12) == "HTTP/1.1 408")) ++n;
        }
    }
    return n;
}

}  // namespace

TEST_CASE("no request ends anvild: invalid UTF-8 in paths, ids, parameters and bodies gets a JSON error on both ports", "[daemon][hardening]") {
    Daemon d;
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    d.start();
    const std::vector<std::string> api_paths = {"/x%ff", "/api/v1/recipes/%ff", "/api/v1/recipes/%ff/history", "/api/v1/recipes/%ff/feasibility",
                                                "/api/v1/recipes?q=%ff&engine=%fe&hardware=%c0", "/api/v1/events?after=%ff", "/%c3%28"};
    for (const auto& path : api_paths) {
        INFO(path);
        const std::string r = raw_exchange(d.api_port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        CHECK(status_of(r) >= 200);
        CHECK(status_of(r) < 500);
        CHECK(body_of(r).is_object());
        CHECK(r.find("EXCEPTION_WHAT") == std::string::npos);
    }
    for (const auto& path : {std::string("/x%ff"), std::string("/v1/x%ff"), std::string("/healthz%ff")}) {
        INFO(path);
        const std::string r = raw_exchange(d.serve_port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        CHECK(status_of(r) == 404);
        CHECK(body_of(r).is_object());
    }
    // A body with invalid UTF-8 and a request line that is not HTTP, on both ports.
    const std::string bad_body = "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}";
    for (int port : {d.api_port, d.serve_port}) {
        const std::string r = raw_exchange(port, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(bad_body.size()) +
                                                     "\r\nConnection: close\r\n\r\n" + bad_body);
        CHECK(status_of(r) >= 400);
        CHECK(body_of(r).is_object());
        const std::string garbage = raw_exchange(port, "\xff\xfe GARBAGE\r\n\r\n");
        CHECK(status_of(garbage) == 400);
        CHECK(body_of(garbage)["error"]["message"].get<std::string>() != "HTTP 400");
    }
    CHECK(alive(d));
}

TEST_CASE("writes: a bodiless POST works, an unauthenticated or oversized body is refused before it is read", "[daemon][hardening]") {
    Daemon d;
    d.repo.write("README.md", "no recipes yet\n");
    d.repo.commit("an empty registry");
    d.start();
    // What `curl -X POST -H 'Authorization: Bearer …' …/sync` sends: no Content-Length, no body.
    const std::string sync = raw_exchange(d.api_port, "POST /api/v1/registry/sync HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + d.token() +
                                                          "\r\nConnection: close\r\n\r\n");
    CHECK(status_of(sync) == 202);
    CHECK(d.cli({"sync"}).exit_code == 0);

    // 400 MB announced, none sent: the 401 comes at once and anvild reads nothing.
    const long before = peak_rss_kb(d.process->pid());
    const auto started = std::chrono::steady_clock::now();
    const std::string unauthenticated =
        raw_exchange(d.api_port, "POST /api/v1/promotion/freeze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 400000000\r\n\r\n", 3000ms);
    CHECK(status_of(unauthenticated) == 401);
    CHECK(body_of(unauthenticated)["error"]["code"] == "unauthorized");
    CHECK(std::chrono::steady_clock::now() - started < 2s);
    const std::string wrong = raw_exchange(d.api_port, "POST /api/v1/promotion/freeze HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                                                           std::string(d.token().size(), 'x') + "\r\nContent-Length: 2\r\n\r\n{}");
    CHECK(status_of(wrong) == 401);
    const std::string oversized = raw_exchange(d.api_port, "POST /api/v1/promotion/freeze HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + d.token() +
                                                               "\r\nContent-Length: 400000000\r\n\r\n",
                                               3000ms);
    CHECK(status_of(oversized) == 413);
    CHECK(body_of(oversized)["error"]["code"] == "payload_too_large");
    // And really sending a large unauthenticated body does not grow the daemon.
    {
        // The daemon answers 401 and closes before the body is sent: the client's next write gets
        // EPIPE, which must not end the test process (httplib does not always pass MSG_NOSIGNAL).
        const auto previous = std::signal(SIGPIPE, SIG_IGN);
        httplib::Client c("127.0.0.1", d.api_port);
        auto r = c.Post("/api/v1/promotion/freeze", std::string(64u << 20, 'a'), "application/json");
        std::signal(SIGPIPE, previous);
        if (r) CHECK(r->status == 401);
    }
    CHECK(peak_rss_kb(d.process->pid()) - before < 32 * 1024);
    CHECK(d.get("/api/v1/status").second["policy"]["frozen"] == false);
    CHECK(alive(d));
}

TEST_CASE("200 idle and 40 trickling connections on each port: /healthz and the stable endpoint still answer within 1 s", "[daemon][hardening]") {
    Daemon d;
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));

    std::vector<int> held, trickling;
    for (int port : {d.api_port, d.serve_port}) {
        for (int i = 0; i < 200; ++i) held.push_back(open_raw(port, ""));
        for (int i = 0; i < 40; ++i) trickling.push_back(held.emplace_back(open_raw(port, "GET /healthz HTTP/1.1\r\n")));
    }
    for (int round = 0; round < 4; ++round) {
        for (int fd : trickling) ::send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
        answered_within_a_second(d, "/healthz", "/healthz");
        std::this_thread::sleep_for(2s);
    }
    // By now (8 s) the tricklers are still within the 10 s head deadline; after it they are cut off.
    std::this_thread::sleep_for(4s);
    CHECK(answered_408(trickling, true) == static_cast<int>(trickling.size()));
    for (int fd : held) ::close(fd);
    CHECK(alive(d));
}

TEST_CASE("40 slow bodies on each port: /v1/models, the API and a completion still answer within 1 s, and each slow body gets 408", "[daemon][hardening]") {
    Daemon d;
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));

    // Each promises 2,000 bytes and sends 10, then a byte now and then: one byte every 25 s once
    // kept every worker of the endpoint busy (/v1/models timed out for 60 s).
    std::vector<int> slow;
    for (int i = 0; i < 40; ++i) {
        slow.push_back(open_raw(d.serve_port, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                              "Content-Length: 2000\r\n\r\n{\"model\": "));
        slow.push_back(open_raw(d.api_port, "GET /api/v1/recipes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2000\r\n\r\n{\"model\": "));
    }
    for (int round = 0; round < 4; ++round) {
        for (int fd : slow) ::send(fd, " ", 1, MSG_NOSIGNAL);
        answered_within_a_second(d, "/api/v1/recipes", "/v1/models");
        std::this_thread::sleep_for(2s);
    }
    // Their deadline is 10 s plus 2,000 bytes at 256 KiB a second: by 14 s each has its 408.
    std::this_thread::sleep_for(6s);
    CHECK(answered_408(slow, false) == static_cast<int>(slow.size()));
    for (int fd : slow) ::close(fd);
    CHECK(alive(d));
}

TEST_CASE("a page on another site or a rebinding name gets 403 from the API and the endpoint: the console and configured origins are answered", "[daemon][hardening][origin]") {
    Daemon d;
    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    config["allowed_origins"] = {"http://app.local:3000"};
    config["allowed_hosts"] = {"gpu-box.lan"};
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));

    const std::string body = chat_request();
    for (int port : {d.api_port, d.serve_port}) {
        INFO(port);
        const std::string path = port == d.api_port ? "/api/v1/registry/sync" : "/v1/chat/completions";
        // A cross-origin text/plain POST, which a browser sends from any page without asking.
        std::string r = raw_exchange(port, "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                                               "\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: " +
                                               std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
        CHECK(status_of(r) == 403);
        CHECK(r.find("allowed_origins") != std::string::npos);
        // A DNS-rebinding page reaches 127.0.0.1 under its own name.
        r = raw_exchange(port, "GET " + std::string(port == d.api_port ? "/api/v1/recipes" : "/v1/models") +
                                   " HTTP/1.1\r\nHost: rebind.evil.example:" + std::to_string(port) + "\r\nConnection: close\r\n\r\n");
        CHECK(status_of(r) == 403);
        CHECK(r.find("allowed_hosts") != std::string::npos);
        // A configured name, localhost, and a configured origin (with CORS headers) are answered.
        r = raw_exchange(port, "GET " + std::string(port == d.api_port ? "/api/v1/recipes" : "/v1/models") +
                                   " HTTP/1.1\r\nHost: gpu-box.lan:" + std::to_string(port) + "\r\nOrigin: http://app.local:3000\r\nConnection: close\r\n\r\n");
        CHECK(status_of(r) == 200);
        CHECK(r.find("Access-Control-Allow-Origin: http://app.local:3000") != std::string::npos);
    }
    // The console, served by anvild, calls its own origin.
    const std::string own = "http://127.0.0.1:" + std::to_string(d.api_port);
    httplib::Client api("127.0.0.1", d.api_port);
    auto page = api.Get("/", httplib::Headers{{"Origin", own}});
    REQUIRE(page);
    CHECK(page->status == 200);
    auto sync = api.Post("/api/v1/registry/sync", httplib::Headers{{"Origin", own}, {"Authorization", "Bearer " + d.token()}}, "", "application/json");
    REQUIRE(sync);
    CHECK(sync->status < 300);
    httplib::Client endpoint("localhost", d.serve_port);
    endpoint.set_read_timeout(10, 0);
    auto chat = endpoint.Post("/v1/chat/completions", body, "application/json");
    REQUIRE(chat);
    CHECK(chat->status == 200);
    CHECK(alive(d));
}

TEST_CASE("a client through SIGKILL and restart of anvild while a qualification runs sees no 503: the endpoint waits for the adopted default", "[daemon][hardening][restart]") {
    Daemon d;
    EngineGate gate(d);
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    // A fixed endpoint address, so that the client keeps the same one across the restart.
    int serve_port = 0;
    {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        socklen_t len = sizeof a;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        serve_port = ntohs(a.sin_port);
        ::close(fd);
    }
    const std::string serve = "127.0.0.1:" + std::to_string(serve_port);
    d.start(serve);
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));
    // A second recipe is being qualified (its engine held before it is ready) when anvild dies.
    gate.hold();
    d.repo.write("recipes/tiny-bf16.json", embedded_recipe("tiny-bf16", "bf16", d.digest));
    d.repo.commit("a candidate");
    REQUIRE(eventually([&] { return d.status_of("tiny-bf16") == "qualifying"; }, 60s));

    std::atomic<bool> done{false};
    std::atomic<int> ok{0}, unavailable{0}, other{0}, refused{0}, ok_after_restart{0};
    std::atomic<bool> restarted{false};
    std::thread client([&] {
        while (!done) {
            httplib::Client c("127.0.0.1", serve_port);
            c.set_connection_timeout(2, 0);
            c.set_read_timeout(20, 0);
            auto r = c.Post("/v1/chat/completions", chat_request(), "application/json");
            if (!r) ++refused;  // anvild is down: no server to answer
            else if (r->status == 200) ok_after_restart += restarted ? 1 : 0, ++ok;
            else if (r->status == 503) ++unavailable;
            else ++other;
            std::this_thread::sleep_for(20ms);
        }
    });
    std::this_thread::sleep_for(1s);
    d.kill();
    d.start(serve);
    restarted = true;
    REQUIRE(eventually([&] { return ok_after_restart >= 20; }, 60s));
    done = true;
    client.join();
    gate.release();
    INFO("ok " << ok << ", 503 " << unavailable << ", other " << other << ", no answer " << refused);
    CHECK(unavailable == 0);
    CHECK(other == 0);
    CHECK(d.serving() == "tiny-f32");
}

TEST_CASE("each engine anvild starts has a key of its own: the engine refuses requests without it, the endpoint forwards with it", "[daemon][hardening]") {
    Daemon d;
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));
    const json engines = d.get("/api/v1/engines").second["data"];
    REQUIRE(engines.size() == 1);
    const int engine_port = engines[0]["port"].get<int>();
    const int engine_pid = engines[0]["pid"].get<int>();

    httplib::Client direct("127.0.0.1", engine_port);
    auto models = direct.Get("/v1/models");
    REQUIRE(models);
    CHECK(models->status == 401);
    auto chat = direct.Post("/v1/chat/completions", chat_request(), "application/json");
    REQUIRE(chat);
    CHECK(chat->status == 401);
    auto health = direct.Get("/health");
    REQUIRE(health);
    CHECK(health->status == 200);

    httplib::Client endpoint("127.0.0.1", d.serve_port);
    auto through = endpoint.Post("/v1/chat/completions", chat_request(), "application/json");
    REQUIRE(through);
    CHECK(through->status == 200);

    // The key is in neither the engine's argv (readable by every local user) nor the API.
    std::ifstream cmdline("/proc/" + std::to_string(engine_pid) + "/cmdline");
    const std::string argv((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    CHECK(argv.find("api-key") == std::string::npos);
    CHECK(d.get("/api/v1/engines").second.dump().find("api_key") == std::string::npos);
}

TEST_CASE("a body nested 100,000 levels deep is refused by the API and relayed by the endpoint without ending anvild", "[daemon][hardening]") {
    Daemon d;
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    auto [code, body] = d.post("/api/v1/default", R"({"recipe_id": )" + deep + "}");
    CHECK(code == 400);
    CHECK(body["error"]["code"] == "invalid_json");
    // The endpoint rewrites "model" in the bodies it forwards: a deep one must not reach its serialiser.
    httplib::Client endpoint("127.0.0.1", d.serve_port);
    auto r = endpoint.Post("/v1/chat/completions", R"({"model": null, "messages": )" + deep + "}", "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(json::parse(r->body, nullptr, false)["error"].is_object());
    CHECK(alive(d));
}

TEST_CASE("anvil-engine: oversized bodies get 413 unread, bad text and deep bodies 400 with a body, and --api-key guards every route but /health", "[engine][hardening]") {
    anvil::test::TempDir dir;
    const auto model = dir / "tiny";
    REQUIRE(anvil::test::run({ANVIL_ENGINE, "make-model", "--out", model.string(), "--preset", "tiny", "--seed", "3"}).exit_code == 0);
    setenv("ANVIL_ENGINE_API_KEY", "engine-key", 1);
    anvil::test::ChildProcess engine({ANVIL_ENGINE, "serve", "--model", model.string(), "--port", "0", "--max-context", "256"});
    unsetenv("ANVIL_ENGINE_API_KEY");
    std::string line;
    int port = 0;
    while (port == 0 && engine.read_line(line, 30000))
        if (auto at = line.rfind(':'); line.find("listening on") != std::string::npos && at != std::string::npos) port = std::stoi(line.substr(at + 1));
    REQUIRE(port > 0);
    httplib::Client c("127.0.0.1", port);
    c.set_bearer_token_auth("engine-key");
    REQUIRE(eventually([&] { auto h = c.Get("/health"); return h && h->status == 200; }, 30s));

    // 60 MB to /tokenize: refused from its Content-Length, before it is read.
    const auto started = std::chrono::steady_clock::now();
    const std::string big = raw_exchange(port, "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer engine-key\r\nContent-Length: 60000000\r\n\r\n", 3000ms);
    CHECK(status_of(big) == 413);
    CHECK(body_of(big)["error"]["message"].get<std::string>().find("at most") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < 2s);

    const std::string bad_text = "{\"prompt\": \"caf\xe9\", \"max_tokens\": 2}";
    auto invalid = c.Post("/v1/completions", bad_text, "application/json");
    REQUIRE(invalid);
    CHECK(invalid->status == 400);
    CHECK(json::parse(invalid->body, nullptr, false)["error"]["type"] == "invalid_request_error");
    auto deep = c.Post("/v1/completions", R"({"prompt": )" + std::string(100000, '[') + std::string(100000, ']') + "}", "application/json");
    REQUIRE(deep);
    CHECK(deep->status == 400);
    auto bias = c.Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 1, "logit_bias": {"99999999": 5}})", "application/json");
    REQUIRE(bias);
    CHECK(bias->status == 400);

    httplib::Client anonymous("127.0.0.1", port);
    for (const char* path : {"/v1/models", "/v1/x%ff"}) {
        auto r = anonymous.Get(path);
        REQUIRE(r);
        CHECK(r->status == 401);
        CHECK(json::parse(r->body, nullptr, false)["error"]["type"] == "authentication_error");
    }
    auto wrong = httplib::Client("127.0.0.1", port);
    wrong.set_bearer_token_auth("engine-kez");
    auto refused = wrong.Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 1})", "application/json");
    REQUIRE(refused);
    CHECK(refused->status == 401);
    auto health = anonymous.Get("/health");
    REQUIRE(health);
    CHECK(health->status == 200);
    auto ok = c.Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})", "application/json");
    REQUIRE(ok);
    CHECK(ok->status == 200);
    engine.kill(SIGTERM);
    CHECK(engine.wait() == 0);
}

#endif  // ANVILD
