// The connection gate every anvil HTTP server runs behind (engine/http), on real loopback sockets
// with small limits: hostile clients (idle, trickling, oversized, malformed) neither stop it from
// answering others nor end the process, and ordinary clients (keep-alive, pipelining, bodiless POST,
// chunked bodies) are served as before.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "engine/http/guarded_server.hpp"
#include "engine/http/request_head.hpp"
#include "daemon/config/config.hpp"
#include "engine/http/safe_text.hpp"
#include "raw_http.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using anvil::http::GuardedServer;
using anvil::test::body_of;
using anvil::test::status_of;

namespace {

std::string error_body(int status, const std::string& message) { return anvil::http::dump_json({{"error", {{"status", status}, {"message", message}}}}); }

// A server with a few routes on a free loopback port, served on its own thread.
struct TestServer {
    explicit TestServer(anvil::http::ServerLimits limits = small_limits()) : server(limits, error_body) {
        server.Get("/ping", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"pong\":true}", "application/json"); });
        server.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
            res.set_content(anvil::http::dump_json({{"bytes", req.body.size()}, {"body", req.body}}), "application/json");
        });
        server.Get("/throw", [](const httplib::Request&, httplib::Response&) -> void { throw std::runtime_error("secret internal detail"); });
        server.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
            std::this_thread::sleep_for(300ms);
            res.set_content("{}", "application/json");
        });
        server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (res.status != 404) return httplib::Server::HandlerResponse::Unhandled;
            // Serialising the raw path throws on invalid UTF-8: the guard must catch what a careless handler does.
            res.set_content(json{{"error", "no route " + req.path}}.dump(), "application/json");
            return httplib::Server::HandlerResponse::Handled;
        });
        port = server.bind_to_any_port("127.0.0.1");
        REQUIRE(port > 0);
        thread = std::thread([this] { server.listen_after_bind(); });
        while (!server.is_running()) std::this_thread::sleep_for(1ms);
    }
    ~TestServer() {
        server.stop();
        thread.join();
    }
    static anvil::http::ServerLimits small_limits() {
        anvil::http::ServerLimits l;
        l.head_deadline = 500ms;
        l.idle_timeout = 1000ms;
        l.max_body_bytes = 4096;
        l.max_head_bytes = 2048;
        l.workers = 2;
        return l;
    }
    GuardedServer server;
    int port = 0;
    std::thread thread;
};

// A raw client socket: for what client libraries never send.
struct Raw {
    int fd = -1;
    explicit Raw(int port) {
        fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    }
    ~Raw() {
        if (fd >= 0) ::close(fd);
    }
    void send(const std::string& bytes) const { REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())); }
    // Everything until the server closes or `timeout` passes.
    std::string read_all(std::chrono::milliseconds timeout = 3000ms) const {
        std::string out;
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
            if (left <= 0) break;
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
            char buf[4096];
            const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) break;
            out.append(buf, static_cast<std::size_t>(n));
        }
        return out;
    }
    bool closed_by_server(std::chrono::milliseconds timeout) const {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
        char buf[4096];
        return ::recv(fd, buf, sizeof buf, MSG_PEEK) == 0 || (p.revents & (POLLHUP | POLLERR));
    }
};

}  // namespace

TEST_CASE("request heads: framing is read from the head alone, and ambiguous framing is refused", "[http]") {
    using anvil::http::BodyFraming;
    using anvil::http::parse_request_head;
    using State = anvil::http::RequestHead::State;
    CHECK(parse_request_head("GET / HTTP/1.1\r\nHost: x\r\n").state == State::incomplete);
    const auto get = parse_request_head("GET / HTTP/1.1\r\nHost: x\r\n\r\nrest");
    CHECK(get.state == State::complete);
    CHECK(get.length == 27);
    CHECK(get.framing == BodyFraming::none);
    const auto post = parse_request_head("POST /a HTTP/1.1\r\ncontent-length:  12 \r\n\r\n");
    CHECK(post.framing == BodyFraming::length);
    CHECK(post.content_length == 12);
    CHECK(parse_request_head("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").framing == BodyFraming::chunked);
    CHECK(parse_request_head("POST /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").state == State::invalid);
    CHECK(parse_request_head("POST /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n").state == State::complete);
    CHECK(parse_request_head("POST /a HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n").state == State::invalid);
    CHECK(parse_request_head("POST /a HTTP/1.1\r\nContent-Length: -1\r\n\r\n").state == State::invalid);
    CHECK(parse_request_head("POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").state == State::invalid);
}

TEST_CASE("request heads name the method, target, fields and a client waiting for 100 Continue", "[http]") {
    const auto head = anvil::http::parse_request_head("POST /v1/x?y=1 HTTP/1.1\r\nHost: h\r\nexpect: 100-Continue\r\nX-A:  b \r\n\r\n");
    CHECK(head.method == "POST");
    CHECK(head.target == "/v1/x?y=1");
    CHECK(head.expect_continue);
    CHECK(head.fields == std::vector<std::pair<std::string, std::string>>{{"Host", "h"}, {"expect", "100-Continue"}, {"X-A", "b"}});
    CHECK_FALSE(anvil::http::parse_request_head("GET / HTTP/1.1\r\n\r\n").expect_continue);
}

TEST_CASE("a chunked body's end is found as its bytes arrive, each byte scanned once", "[http]") {
    using anvil::http::ChunkedBodyScan;
    using State = ChunkedBodyScan::State;
    const std::string body = "5\r\nhello\r\n1a;ext=1\r\n" + std::string(26, 'x') + "\r\n0\r\nTrailer: t\r\n\r\nNEXT";
    const std::size_t end = body.size() - 4;
    // Whole, and byte by byte: the same end and data count.
    ChunkedBodyScan whole;
    CHECK(whole.feed(body) == State::complete);
    CHECK(whole.end() == end);
    CHECK(whole.data_bytes() == 31);
    ChunkedBodyScan bytewise;
    for (std::size_t i = 0; i < end; ++i) {
        INFO(i);
        REQUIRE(bytewise.feed(std::string_view(body).substr(0, i)) == State::more);
    }
    CHECK(bytewise.feed(std::string_view(body).substr(0, end)) == State::complete);
    CHECK(bytewise.end() == end);
    // Framing a parser refuses is invalid here too.
    const std::pair<const char*, const char*> bad[] = {
        {"zz\r\n", "not a hexadecimal number"},
        {"\r\n", "not a hexadecimal number"},
        {"5\r\nhelloXX", "does not end with CRLF"},
        {"fffffffffffffffff\r\n", "not a hexadecimal number"},
    };
    for (const auto& [text, why] : bad) {
        INFO(text);
        ChunkedBodyScan scan;
        CHECK(scan.feed(text) == State::invalid);
        CHECK_THAT(scan.error(), Catch::Contains(why));
    }
    ChunkedBodyScan long_line(16);
    CHECK(long_line.feed(std::string(17, '1')) == State::invalid);
}

TEST_CASE("a body must arrive within its deadline: a slow one gets 408 and holds no worker", "[http]") {
    auto limits = TestServer::small_limits();
    limits.head_deadline = 500ms;
    limits.idle_timeout = 10s;
    limits.min_body_bytes_per_second = 1000;  // 100 bytes: 600 ms in all
    TestServer t(limits);
    const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
    // 40 slow bodies on a server with 2 workers: everyone else is answered at once.
    std::vector<std::unique_ptr<Raw>> slow;
    for (int i = 0; i < 40; ++i) {
        slow.push_back(std::make_unique<Raw>(t.port));
        slow.back()->send(head + "{\"a\":");
    }
    for (int round = 0; round < 3; ++round) {
        const auto started = std::chrono::steady_clock::now();
        httplib::Client c("127.0.0.1", t.port);
        c.set_read_timeout(2, 0);
        auto ping = c.Get("/ping");
        REQUIRE(ping);
        CHECK(ping->status == 200);
        auto echo = c.Post("/echo", "{\"b\":1}", "application/json");
        REQUIRE(echo);
        CHECK(echo->status == 200);
        CHECK(std::chrono::steady_clock::now() - started < 1000ms);
        std::this_thread::sleep_for(100ms);
    }
    // Past the deadline every slow body is answered 408 and its connection closed.
    int timed_out = 0;
    for (auto& c : slow) {
        const std::string r = c->read_all(3000ms);
        if (status_of(r) == 408 && r.find("did not arrive in time") != std::string::npos) ++timed_out;
    }
    CHECK(timed_out == 40);

    // A chunked body that stalls: the same (its deadline counts it at the largest body allowed).
    {
        Raw c(t.port);
        c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
        const auto started = std::chrono::steady_clock::now();
        const std::string r = c.read_all(10000ms);
        CHECK(status_of(r) == 408);
        CHECK(std::chrono::steady_clock::now() - started < 6000ms);  // 500 ms + 4096 bytes at 1000 a second
    }
    // A body that arrives in time, in pieces, is served.
    {
        Raw c(t.port);
        c.send(head);
        for (int i = 0; i < 10; ++i) {
            std::this_thread::sleep_for(20ms);
            c.send(std::string(10, 'z'));
        }
        const std::string r = c.read_all(1500ms);
        CHECK(status_of(r) == 200);
        CHECK(body_of(r)["bytes"] == 100);
    }
}

TEST_CASE("clients waiting for 100 Continue are told by the gate, which reads their bodies, so they hold no worker either", "[http]") {
    auto limits = TestServer::small_limits();
    limits.head_deadline = 500ms;
    limits.min_body_bytes_per_second = 100;  // 100 bytes: 1.5 s in all
    TestServer t(limits);
    const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n";
    std::vector<std::unique_ptr<Raw>> waiting;
    for (int i = 0; i < 20; ++i) {
        waiting.push_back(std::make_unique<Raw>(t.port));
        waiting.back()->send(head);
    }
    std::vector<std::string> answers;
    for (auto& c : waiting) {
        answers.push_back(c->read_all(50ms));
        CHECK_THAT(answers.back(), Catch::StartsWith("HTTP/1.1 100 Continue\r\n\r\n"));
    }
    const auto started = std::chrono::steady_clock::now();
    httplib::Client client("127.0.0.1", t.port);
    auto ping = client.Get("/ping");
    REQUIRE(ping);
    CHECK(ping->status == 200);
    CHECK(std::chrono::steady_clock::now() - started < 1000ms);
    int timed_out = 0;
    for (std::size_t i = 0; i < waiting.size(); ++i) {
        answers[i] += waiting[i]->read_all(3000ms);
        timed_out += answers[i].find("\r\n\r\nHTTP/1.1 408 ") != std::string::npos;
    }
    CHECK(timed_out == 20);
    // One that sends its body once told gets one 100 and its answer.
    Raw c(t.port);
    c.send(head);
    CHECK(c.read_all(300ms) == "HTTP/1.1 100 Continue\r\n\r\n");
    c.send(std::string(100, 'b'));
    const std::string r = c.read_all(1000ms);
    CHECK(status_of(r) == 200);
    CHECK(body_of(r)["bytes"] == 100);
    CHECK(r.find("100 Continue") == std::string::npos);
}

TEST_CASE("bodies abandoned midway leave the gate's budget as they found it", "[http]") {
    auto limits = TestServer::small_limits();
    limits.head_deadline = 500ms;
    limits.min_body_bytes_per_second = 10;      // 100 bytes: 10.5 s, long enough to hold a worker
    limits.max_gate_body_bytes = 1000;
    TestServer t(limits);
    // Four clients send a quarter of a body each, then go: 1,000 bytes that must not stay counted.
    for (int i = 0; i < 4; ++i) {
        Raw gone(t.port);
        gone.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + std::string(250, 'g'));
        std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(200ms);
    // Were the budget spent, these slow bodies would go to the two workers and hold them.
    std::vector<std::unique_ptr<Raw>> slow;
    for (int i = 0; i < 4; ++i) {
        slow.push_back(std::make_unique<Raw>(t.port));
        slow.back()->send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc");
    }
    std::this_thread::sleep_for(100ms);
    const auto started = std::chrono::steady_clock::now();
    httplib::Client client("127.0.0.1", t.port);
    client.set_read_timeout(15, 0);
    auto ping = client.Get("/ping");
    REQUIRE(ping);
    CHECK(ping->status == 200);
    CHECK(std::chrono::steady_clock::now() - started < 1000ms);
}

TEST_CASE("past the gate's body budget a body is read by a worker, under the same deadline", "[http]") {
    auto limits = TestServer::small_limits();
    limits.head_deadline = 500ms;
    limits.min_body_bytes_per_second = 1000;
    limits.max_gate_body_bytes = 16;  // any body of more goes to a worker as it arrives
    TestServer t(limits);
    Raw c(t.port);
    const auto started = std::chrono::steady_clock::now();
    c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + std::string(20, 'a'));
    const std::string r = c.read_all(3000ms);
    CHECK(status_of(r) == 408);
    CHECK(std::chrono::steady_clock::now() - started < 2000ms);
    CHECK(c.closed_by_server(500ms));
    // Whole bodies past the budget are still served.
    httplib::Client client("127.0.0.1", t.port);
    auto echo = client.Post("/echo", std::string(1000, 'q'), "text/plain");
    REQUIRE(echo);
    CHECK(echo->status == 200);
}

TEST_CASE("Host and Origin: IP addresses, localhost and known names, same-origin pages and configured origins", "[http][origin]") {
    using anvil::http::judge_origin;
    const anvil::http::OriginPolicy none;
    const anvil::http::OriginPolicy configured{{"gpu-box.lan"}, {"http://app.local:3000"}};
    const std::vector<std::string> machine = {"this-box"};
    // host, origin, allowed with no configuration, allowed with `configured`, cross origin there
    const struct {
        const char *host, *origin;
        bool plain, with_config, cross;
    } table[] = {
        {"127.0.0.1:7701", "", true, true, false},
        {"127.0.0.1", "", true, true, false},
        {"localhost:7700", "", true, true, false},
        {"LOCALHOST", "", true, true, false},
        {"[::1]:7701", "", true, true, false},
        {"10.1.2.3:7701", "", true, true, false},
        {"this-box:7701", "", true, true, false},
        {"", "", true, true, false},  // HTTP/1.0: no Host
        {"evil.example:7701", "", false, false, false},
        {"127.0.0.1.evil.example", "", false, false, false},
        {"gpu-box.lan:7701", "", false, true, false},
        {"GPU-BOX.lan", "", false, true, false},
        {"[::1", "", false, false, false},
        // same origin: the console on anvild's own port
        {"127.0.0.1:7700", "http://127.0.0.1:7700", true, true, false},
        {"localhost", "http://localhost:80", true, true, false},
        // another page: refused unless configured
        {"127.0.0.1:7701", "http://127.0.0.1:7700", false, false, false},
        {"127.0.0.1:7701", "http://evil.example", false, false, false},
        {"127.0.0.1:7701", "null", false, false, false},
        {"127.0.0.1:7701", "http://app.local:3000", false, true, true},
        {"127.0.0.1:7701", "HTTP://APP.LOCAL:3000", false, true, true},
        {"127.0.0.1:7701", "http://app.local:3001", false, false, false},
    };
    for (const auto& row : table) {
        INFO(row.host << " / " << row.origin);
        CHECK(judge_origin(none, machine, row.host, row.origin).allowed == row.plain);
        const auto verdict = judge_origin(configured, machine, row.host, row.origin);
        CHECK(verdict.allowed == row.with_config);
        CHECK(verdict.cross_origin == row.cross);
        if (!verdict.allowed) CHECK_THAT(verdict.refusal, Catch::Contains("allowed_"));
    }
    CHECK(judge_origin({{}, {"*"}}, machine, "127.0.0.1", "http://anything.example").cross_origin);
    CHECK(anvil::http::host_without_port("[::1]:7701") == "[::1]");
    CHECK(anvil::http::host_without_port("Box:1") == "box");
}

TEST_CASE("a server with an origin policy refuses other Hosts and Origins before the body, and answers a configured origin's preflight", "[http][origin]") {
    TestServer t;
    t.server.set_origin_policy({{}, {"http://app.local:3000"}});
    // A DNS-rebinding page: its own name in Host.
    {
        Raw c(t.port);
        c.send("GET /ping HTTP/1.1\r\nHost: evil.example:" + std::to_string(t.port) + "\r\n\r\n");
        const std::string r = c.read_all(2000ms);
        CHECK(status_of(r) == 403);
        CHECK_THAT(body_of(r)["error"]["message"].get<std::string>(), Catch::Contains("allowed_hosts"));
    }
    // A page on another site posting text/plain (no preflight in a browser): refused unread.
    {
        Raw c(t.port);
        c.send("POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: 400000\r\n\r\nx");
        const std::string r = c.read_all(2000ms);
        CHECK(status_of(r) == 403);
        CHECK(c.closed_by_server(1000ms));
    }
    httplib::Client client("127.0.0.1", t.port);
    // Same origin, and no Origin at all (curl, SDKs): answered.
    auto same = client.Post("/echo", httplib::Headers{{"Origin", "http://127.0.0.1:" + std::to_string(t.port)}}, "{}", "application/json");
    REQUIRE(same);
    CHECK(same->status == 200);
    CHECK_FALSE(same->has_header("Access-Control-Allow-Origin"));
    // The configured origin: its preflight, then its request with CORS headers.
    auto preflight = client.Options("/echo", httplib::Headers{{"Origin", "http://app.local:3000"}, {"Access-Control-Request-Method", "POST"}});
    REQUIRE(preflight);
    CHECK(preflight->status == 204);
    CHECK_THAT(preflight->get_header_value("Access-Control-Allow-Headers"), Catch::Contains("Authorization"));
    CHECK(preflight->get_header_value("Access-Control-Allow-Origin") == "http://app.local:3000");
    CHECK(preflight->get_header_value_count("Access-Control-Allow-Origin") == 1);
    auto cross = client.Post("/echo", httplib::Headers{{"Origin", "http://app.local:3000"}}, "{}", "application/json");
    REQUIRE(cross);
    CHECK(cross->status == 200);
    CHECK(cross->get_header_value("Access-Control-Allow-Origin") == "http://app.local:3000");
}

TEST_CASE("safe text: invalid UTF-8 is replaced, valid text kept byte for byte", "[http]") {
    CHECK(anvil::http::valid_utf8("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
    CHECK(anvil::http::valid_utf8("/x\xff") == "/x\xef\xbf\xbd");
    CHECK(anvil::http::valid_utf8("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");           // overlong
    CHECK(anvil::http::valid_utf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
    CHECK(anvil::http::dump_json(json("\xff")) == "\"\xef\xbf\xbd\"");
}

TEST_CASE("request bodies: nesting past the limit is refused while parsing, without building it", "[http]") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    const auto refused = anvil::http::parse_json_body(deep);
    CHECK_FALSE(refused.ok());
    CHECK(refused.error.find("64 levels") != std::string::npos);
    CHECK(refused.value.is_null());
    CHECK(anvil::http::parse_json_body(std::string(64, '[') + std::string(64, ']')).ok());
    CHECK_FALSE(anvil::http::parse_json_body(std::string(65, '[') + std::string(65, ']')).ok());
    CHECK(anvil::http::parse_json_body(R"({"a": {"b": [1, 2, {"c": null}]}})").value["a"]["b"][2].contains("c"));
    const auto malformed = anvil::http::parse_json_body("{\"a\": \"\xff\"}");
    CHECK_FALSE(malformed.ok());
    CHECK_NOTHROW(json(malformed.error).dump());
}

TEST_CASE("an invalid UTF-8 path, a throwing handler and a throwing error handler each get a JSON error: the server goes on", "[http]") {
    TestServer t;
    {
        Raw c(t.port);
        c.send("GET /x%ff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        const std::string r = c.read_all();
        CHECK(status_of(r) == 404);
        CHECK(body_of(r).is_object());
    }
    {
        Raw c(t.port);
        c.send("GET /throw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        const std::string r = c.read_all();
        CHECK(status_of(r) == 500);
        CHECK(body_of(r)["error"]["message"].get<std::string>().find("secret") == std::string::npos);
        CHECK(r.find("EXCEPTION_WHAT") == std::string::npos);
        CHECK(r.find("secret internal detail") == std::string::npos);
    }
    httplib::Client client("127.0.0.1", t.port);
    auto res = client.Get("/ping");
    REQUIRE(res);
    CHECK(res->status == 200);
}

TEST_CASE("a request without Content-Length has an empty body: keep-alive and pipelined requests are answered in order", "[http]") {
    TestServer t;
    Raw c(t.port);
    // A bodiless POST, then two pipelined requests in one write, on one connection.
    c.send("POST /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string r;
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    while (r.find("\"bytes\":0") == std::string::npos && std::chrono::steady_clock::now() < deadline) r += c.read_all(200ms);
    CHECK(status_of(r) == 200);
    CHECK(body_of(r)["bytes"] == 0);
    c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    r = c.read_all();
    const auto hello = r.find("\"body\":\"hello\"");
    const auto pong = r.find("\"pong\":true");
    CHECK(hello != std::string::npos);
    CHECK(pong != std::string::npos);
    CHECK(hello < pong);
}

TEST_CASE("bodies over the limit get 413 before they are read: admission refuses before the body: the connection closes", "[http]") {
    TestServer t;
    t.server.set_admission([](const httplib::Request& req) -> std::optional<anvil::http::Refusal> {
        if (req.method == "POST" && req.get_header_value("Authorization") != "Bearer right") return anvil::http::Refusal{401, "no token"};
        return std::nullopt;
    });
    {
        // A head that promises 400 MB, and not a byte of it sent: the answer comes anyway.
        Raw c(t.port);
        c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 400000000\r\n\r\n");
        const std::string r = c.read_all(2000ms);
        CHECK(status_of(r) == 401);
        CHECK(c.closed_by_server(1000ms));
    }
    {
        Raw c(t.port);
        c.send("POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer right\r\nContent-Length: 400000000\r\n\r\n");
        const std::string r = c.read_all(2000ms);
        CHECK(status_of(r) == 413);
        CHECK(body_of(r)["error"]["message"].get<std::string>().find("4096") != std::string::npos);
    }
    {
        // A chunked body has no length up front: it is cut off where it passes the limit.
        Raw c(t.port);
        std::string chunked = "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer right\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (int i = 0; i < 10; ++i) chunked += "400\r\n" + std::string(1024, 'a') + "\r\n";
        chunked += "0\r\n\r\n";
        c.send(chunked);
        const std::string r = c.read_all(2000ms);
        CHECK(status_of(r) == 413);
    }
    {
        // What follows the limit in a chunked body is never read as a request of its own: the
        // connection closes with the 413 (the bytes past the limit were once answered as requests).
        const std::string smuggled = "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";
        std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer right\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (int i = 0; i < 20; ++i) request += "100\r\n" + std::string(256, 'a') + "\r\n";
        char size[16];
        std::snprintf(size, sizeof size, "%zx", smuggled.size());
        request += std::string(size) + "\r\n" + smuggled + "\r\n0\r\n\r\n";
        Raw c(t.port);
        c.send(request);
        const std::string r = c.read_all(2000ms);
        CHECK(status_of(r) == 413);
        CHECK(r.find("pong") == std::string::npos);
        CHECK(r.find("HTTP/1.1", 1) == std::string::npos);  // one answer, then the connection closed
        // The same through handle_bytes, the path the HTTP fuzzer drives.
        const std::string in_memory = t.server.handle_bytes(request);
        CHECK(status_of(in_memory) == 413);
        CHECK(in_memory.find("HTTP/1.1", 1) == std::string::npos);
    }
    {
        Raw c(t.port);
        c.send("POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer right\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        const std::string r = c.read_all();
        CHECK(status_of(r) == 200);
        CHECK(body_of(r)["body"] == "hello");
    }
}

TEST_CASE("heads that trickle are cut off at the deadline, oversized heads get 431, idle keep-alive connections close", "[http]") {
    TestServer t;
    Raw trickle(t.port);
    trickle.send("GET /ping HTTP/1.1\r\n");
    const auto start = std::chrono::steady_clock::now();
    std::string r;
    for (int i = 0; i < 10 && r.empty(); ++i) {
        ::send(trickle.fd, "X-A: b\r\n", 8, MSG_NOSIGNAL);
        r = trickle.read_all(150ms);
    }
    CHECK(status_of(r) == 408);
    CHECK(std::chrono::steady_clock::now() - start < 1500ms);

    Raw big(t.port);
    big.send("GET /ping HTTP/1.1\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n");
    CHECK(status_of(big.read_all()) == 431);

    Raw idle(t.port);
    idle.send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string first;
    for (int i = 0; i < 20 && first.find("pong") == std::string::npos; ++i) first += idle.read_all(100ms);
    CHECK(status_of(first) == 200);
    CHECK(idle.closed_by_server(3000ms));  // idle_timeout is 1 s
}

TEST_CASE("hundreds of idle and trickling connections do not stop a server with two workers from answering", "[http]") {
    TestServer t;
    std::vector<std::unique_ptr<Raw>> idle, trickling;
    for (int i = 0; i < 200; ++i) idle.push_back(std::make_unique<Raw>(t.port));
    for (int i = 0; i < 40; ++i) {
        trickling.push_back(std::make_unique<Raw>(t.port));
        trickling.back()->send("GET /ping HTTP/1.1\r\n");
    }
    // A slow request holds one worker; the other still answers everyone else at once.
    std::thread slow([&] {
        httplib::Client c("127.0.0.1", t.port);
        c.Get("/slow");
    });
    for (int i = 0; i < 5; ++i) {
        for (auto& s : trickling) ::send(s->fd, "X-A: b\r\n", 8, MSG_NOSIGNAL);
        const auto started = std::chrono::steady_clock::now();
        httplib::Client c("127.0.0.1", t.port);
        c.set_read_timeout(2, 0);
        auto res = c.Get("/ping");
        REQUIRE(res);
        CHECK(res->status == 200);
        CHECK(std::chrono::steady_clock::now() - started < 1000ms);
        std::this_thread::sleep_for(50ms);
    }
    slow.join();
}

TEST_CASE("over the connection limit the connection waiting longest makes room", "[http]") {
    auto limits = TestServer::small_limits();
    limits.max_connections = 20;
    limits.head_deadline = 10s;
    TestServer t(limits);
    std::vector<std::unique_ptr<Raw>> held;
    for (int i = 0; i < 40; ++i) held.push_back(std::make_unique<Raw>(t.port));
    std::this_thread::sleep_for(200ms);
    int closed = 0;
    for (auto& s : held) closed += s->closed_by_server(10ms) ? 1 : 0;
    CHECK(closed >= 20);
    CHECK(held.front()->closed_by_server(10ms));
    httplib::Client c("127.0.0.1", t.port);
    auto res = c.Get("/ping");
    REQUIRE(res);
    CHECK(res->status == 200);
}

TEST_CASE("handle_bytes runs raw bytes through parsing, routing and handlers without a socket", "[http]") {
    TestServer t;
    const std::string r = t.server.handle_bytes("GET /x%ff HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
    CHECK(status_of(r) == 404);
    CHECK(r.find("\"body\":\"hi\"") != std::string::npos);
    CHECK(status_of(t.server.handle_bytes("POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")) == 400);
    CHECK(status_of(t.server.handle_bytes("garbage\r\n\r\n")) == 400);
    // After a request httplib cannot parse, nothing on the connection is trusted.
    const std::string after_garbage = t.server.handle_bytes("garbage\r\n\r\nGET /ping HTTP/1.1\r\n\r\n");
    CHECK(after_garbage.find("pong") == std::string::npos);
    CHECK(after_garbage.find("Connection: close") != std::string::npos);
}

TEST_CASE("max_request_body_bytes is a daemon configuration key, 16 MiB unless set", "[http][config]") {
    using anvil::daemon::parse_config;
    CHECK(parse_config(R"({"sources": [{"url": "/srv/registry"}]})", "/etc/anvil/anvild.json").max_request_body_bytes == std::size_t(16) << 20);
    CHECK(parse_config(R"({"sources": [{"url": "/a"}], "max_request_body_bytes": 65536})", "/etc/anvil/anvild.json").max_request_body_bytes == 65536);
    for (const char* bad : {R"({"max_request_body_bytes": 10})", R"({"max_request_body_bytes": "16MiB"})"})
        CHECK_THROWS_WITH(parse_config(bad, "/etc/anvil/anvild.json"), Catch::Contains("/max_request_body_bytes"));
}

TEST_CASE("bearer tokens match only exactly, whatever the given token's length", "[http]") {
    auto with = [](const std::string& auth) {
        httplib::Request req;
        if (!auth.empty()) req.set_header("Authorization", auth);
        return req;
    };
    CHECK(anvil::http::has_bearer_token(with("Bearer s3cret"), "s3cret"));
    for (const char* wrong : {"Bearer s3cres", "Bearer s3cre", "Bearer s3crett", "Bearer ", "bearer s3cret", "s3cret", "Basic s3cret", ""})
        CHECK_FALSE(anvil::http::has_bearer_token(with(wrong), "s3cret"));
    CHECK_FALSE(anvil::http::has_bearer_token(with("Bearer "), ""));
}
