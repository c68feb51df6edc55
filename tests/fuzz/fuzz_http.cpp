// Fuzzes what both HTTP servers answer to bytes: anvild's REST API (ApiServer) and the stable
// OpenAI-compatible endpoint (StableEndpoint), each a real server with its real routes and handlers,
// fed through GuardedServer::handle_bytes (head parsing, admission, httplib's parsing and routing,
// the handlers) on no socket. The process builds them once: a Store in a fresh temporary directory
// holding one example recipe, a configuration with no sources, a Reconciler that never runs a pass,
// an endpoint with no upstream (its /v1 routes answer 503) and one whose upstream is port 0 on the
// loopback, where a connection is refused at once: forward() checks and rewrites the body, then
// answers 502. That one gets only built requests whose body does not ask for a stream (a stream is
// read by a thread of its own). No socket is bound, nothing leaves the machine, no thread starts
// per input.
//
// An input is either
//  - a raw request (it starts with 'A'..'Z', as the seeds do): the bytes as they are, to the API and
//    the endpoint without an upstream;
//  - or a selector byte and then a target suffix, '\n', a body: a request built around them, so most
//    inputs reach the handlers. Selector bits 0-2: the method (GET, POST, HEAD, PUT, DELETE, OPTIONS,
//    PATCH, POST with a chunked body); bit 3: with the API's token (writes need it); bits 4-7: the
//    start of the target, from `kTargets`.
//
// Both servers judge Host and Origin as anvild does (the host "anvil", which the seeds and built
// requests use, and the origin http://app.local:3000 are configured), and each chunked request's
// body is also scanned as the connection gate scans it, whole and in pieces, which must agree.
//
// Every answer must be well formed: each response starts "HTTP/1.1 " with a status from 100 to 599,
// its framing holds (Content-Length or chunks), a JSON Content-Type has a body that parses as JSON
// (strictly: valid UTF-8 too), no status is 500 (every bad request is the client's error, and
// nothing in this process fails on its own), and no response has httplib's EXCEPTION_WHAT header
// (internal text). handle_bytes must not throw.
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "daemon/anvild/api_server.hpp"
#include "daemon/anvild/wiring.hpp"
#include "daemon/config/config.hpp"
#include "daemon/controller/daemon_metrics.hpp"
#include "daemon/controller/reconciler.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "engine/http/guarded_server.hpp"
#include "engine/http/request_head.hpp"
#include "engine/http/safe_text.hpp"
#include "registry/document.hpp"
#include "state/store.hpp"

namespace {

using namespace anvil;

constexpr const char* kToken = "fuzz-token-0123456789abcdef";
// Small enough that the fuzzer reaches the 413 paths with short inputs.
constexpr std::size_t kMaxBody = 2048;

// The start of a built request's target: every route of both servers, and their query strings.
// Selectors 0x41-0x5A are letters, the raw form: the entries they would pick (4 and 5) matter least.
constexpr const char* kTargets[16] = {
    "/",
    "/healthz",
    "/api/v1/recipes",
    "/api/v1/recipes?",
    "/v1/completions",
    "/v1/embeddings",
    "/api/v1/recipes/",
    "/api/v1/recipes/anvil-tiny-llama-f32-cpu",
    "/api/v1/events?",
    "/api/v1/default",
    "/api/v1/registry/sync",
    "/api/v1/promotion/",
    "/api/v1/",
    "/metrics",
    "/v1/chat/completions",
    "/v1/models",
};
constexpr const char* kMethods[8] = {"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "POST"};

// Both servers and what they stand on, built once per process; the directory goes with them at exit.
struct Servers {
    std::filesystem::path dir;
    daemon::DaemonConfig config;
    std::unique_ptr<state::Store> store;
    std::unique_ptr<endpoint::StableEndpoint> endpoint;  // no upstream
    std::unique_ptr<endpoint::StableEndpoint> refused;   // an upstream that refuses connections
    daemon::DaemonMetrics metrics;
    std::unique_ptr<daemon::ProductionController> controller;
    std::unique_ptr<daemon::ApiServer> api;

    Servers() {
        // Logs go nowhere, but are still formatted: fuzzed text passes through them too.
        spdlog::set_default_logger(std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>()));
        // /api/v1/inventory reads NVML on every request: never a real driver here (slow, and not
        // what is fuzzed).
        ::setenv("ANVIL_NVML_LIBRARY", "/nonexistent/anvil-fuzz/libnvidia-ml.so.1", 1);

        // tmpfs when there is one: the writes' commits cost no disk.
        std::string base = std::filesystem::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0
                               ? std::string("/dev/shm")
                               : std::filesystem::temp_directory_path().string();
        std::string templ = base + "/anvil-fuzz-http-XXXXXX";
        if (!::mkdtemp(templ.data())) {
            std::perror("fuzz_http: mkdtemp");
            std::abort();
        }
        dir = templ;

        config.data_dir = dir;
        config.inventory_mode = "none";
        config.listen = {"127.0.0.1", 0};
        config.serve = {"127.0.0.1", 0};
        config.max_request_body_bytes = kMaxBody;
        // The seeds' and built requests' Host; other Hosts and any Origin reach the origin policy's refusals.
        config.allowed_hosts = {"anvil"};
        config.allowed_origins = {"http://app.local:3000"};
        store = std::make_unique<state::Store>(dir / "anvil.db");
        seed_recipe();

        endpoint::EndpointOptions options;
        options.model_alias = config.served_model_alias;
        options.max_body_bytes = kMaxBody;
        options.origin_policy = http::OriginPolicy{config.allowed_hosts, config.allowed_origins};
        endpoint = std::make_unique<endpoint::StableEndpoint>(options);
        refused = std::make_unique<endpoint::StableEndpoint>(options);
        refused->switch_to(endpoint::Upstream{"127.0.0.1", 0, "fuzz-model", "fuzz-engine", "fuzz-recipe", "fuzz-engine-key"});
        controller = std::make_unique<daemon::ProductionController>(config, *store, *endpoint, metrics);
        api = std::make_unique<daemon::ApiServer>(config, *store, controller->reconciler(), metrics, kToken);
    }

    ~Servers() {
        api.reset();
        controller.reset();
        refused.reset();
        endpoint.reset();
        store.reset();
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }

    // One recipe in the ledger, so the detail, history and feasibility routes have something to show.
    void seed_recipe() {
        const std::filesystem::path file = std::filesystem::path(ANVIL_SOURCE_DIR) / "examples/registry/recipes/anvil-tiny-llama-f32-cpu.json";
        std::ifstream in(file, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto doc = registry::parse_document(bytes, {"/srv/registry", std::string(40, 'a'), "recipes/anvil-tiny-llama-f32-cpu.json",
                                                          std::string(40, 'b'), ""});
        if (!doc.valid() || !doc.recipe()) {
            std::fprintf(stderr, "fuzz_http: %s is not a valid recipe; the ledger stays empty\n", file.c_str());
            return;
        }
        store->ingest_revision(0, doc);
    }
};

Servers& servers() {
    static Servers s;
    return s;
}

[[noreturn]] void violation(const char* what) {
    std::fprintf(stderr, "fuzz_http: %s\n", what);
    __builtin_trap();
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool same_name(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
    return true;
}

// Checks every response in `out` (pipelined requests get one each). `head_sent`: some request was a
// HEAD, whose response announces a Content-Length without a body.
void check_responses(const std::string& out, bool head_sent) {
    std::size_t pos = 0;
    while (pos < out.size()) {
        const std::size_t head_end = out.find("\r\n\r\n", pos);
        if (head_end == std::string::npos) violation("a response without the end of its head");
        const std::string_view head(out.data() + pos, head_end - pos);
        if (!starts_with(head, "HTTP/1.1 ") || head.size() < 12 || (head.size() > 12 && head[12] != ' '))
            violation("a response whose status line is not 'HTTP/1.1 NNN ...'");
        int status = 0;
        for (std::size_t i = 9; i < 12; ++i) {
            if (head[i] < '0' || head[i] > '9') violation("a response whose status is not three digits");
            status = status * 10 + (head[i] - '0');
        }
        if (status < 100 || status > 599) violation("a response status outside 100-599");
        if (status == 500) violation("a 500: a handler failed on a request it should have refused, or on its own");

        std::string content_type;
        std::optional<std::size_t> content_length;
        bool chunked = false;
        std::size_t line = head.find("\r\n");
        while (line != std::string_view::npos) {
            const std::size_t next = head.find("\r\n", line + 2);
            const std::string_view field = head.substr(line + 2, next == std::string_view::npos ? std::string_view::npos : next - line - 2);
            line = next;
            const std::size_t colon = field.find(':');
            if (colon == std::string_view::npos) violation("a response header line without a colon");
            const std::string_view name = field.substr(0, colon);
            std::string_view value = field.substr(colon + 1);
            while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
            // A body may quote the request, so only a header counts.
            if (same_name(name, "EXCEPTION_WHAT")) violation("a response carries httplib's EXCEPTION_WHAT header");
            if (same_name(name, "Content-Type")) content_type = value;
            else if (same_name(name, "Transfer-Encoding")) chunked = value.find("chunked") != std::string_view::npos;
            else if (same_name(name, "Content-Length")) {
                std::size_t n = 0;
                if (value.empty() || value.size() > 12) violation("a response Content-Length that is no small number");
                for (char c : value) {
                    if (c < '0' || c > '9') violation("a response Content-Length that is no number");
                    n = n * 10 + static_cast<std::size_t>(c - '0');
                }
                content_length = n;
            }
        }
        pos = head_end + 4;
        if (status < 200) continue;  // 100 Continue: the final response follows

        std::optional<std::string> body;
        if (chunked) {
            std::string joined;
            for (;;) {
                const std::size_t eol = out.find("\r\n", pos);
                if (eol == std::string::npos) violation("a chunked response cut off in a chunk size");
                std::size_t size = 0;
                if (eol == pos || eol - pos > 8) violation("a chunk size that is no small hex number");
                for (std::size_t i = pos; i < eol; ++i) {
                    const int d = std::isdigit(static_cast<unsigned char>(out[i])) ? out[i] - '0'
                                  : (out[i] >= 'a' && out[i] <= 'f')             ? out[i] - 'a' + 10
                                  : (out[i] >= 'A' && out[i] <= 'F')             ? out[i] - 'A' + 10
                                                                                  : -1;
                    if (d < 0) violation("a chunk size that is not hex");
                    size = size * 16 + static_cast<std::size_t>(d);
                }
                pos = eol + 2;
                if (size == 0) {
                    const std::size_t end = out.find("\r\n\r\n", pos - 2);
                    if (end == std::string::npos) violation("a chunked response without its last line");
                    pos = end + 4;
                    break;
                }
                if (out.size() - pos < size + 2 || out.compare(pos + size, 2, "\r\n") != 0) violation("a chunk cut off or without its CRLF");
                joined.append(out, pos, size);
                pos += size + 2;
            }
            // A stream's body is whatever the upstream sent: not judged here.
        } else if (content_length) {
            const std::string_view rest(out.data() + pos, out.size() - pos);
            if (*content_length > 0 && head_sent && (rest.empty() || starts_with(rest, "HTTP/1.1 "))) {
                // The answer to a HEAD: the length the GET would have, and no body.
            } else {
                if (rest.size() < *content_length) violation("a response shorter than its Content-Length");
                body = std::string(rest.substr(0, *content_length));
                pos += *content_length;
            }
        } else {
            body = std::string();  // nothing announced: nothing sent
        }
        if (body && starts_with(content_type, "application/json") && !nlohmann::json::accept(*body))
            violation("a response says application/json and its body is not JSON (or not UTF-8)");
    }
}

struct Built {
    std::string request;
    bool single = false;  // one request, whose body is `body`: nothing pipelined behind it
    std::string_view body;
};

// One request around a fuzzed target suffix and body (see the top of this file).
Built build_request(std::uint8_t selector, std::string_view rest) {
    const int method = selector & 7;
    const bool with_token = selector & 8;
    const std::size_t newline = rest.find('\n');
    const std::string_view suffix = rest.substr(0, newline);
    const std::string_view body = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    // A CR in the target ends the request line early, and what follows may be more requests.
    const bool single = suffix.find('\r') == std::string_view::npos;

    std::string request = std::string(kMethods[method]) + " " + kTargets[selector >> 4] + std::string(suffix) + " HTTP/1.1\r\nHost: anvil\r\n";
    if (with_token) request += std::string("Authorization: Bearer ") + kToken + "\r\n";
    request += "Content-Type: application/json\r\n";
    if (method == 7) {
        request += "Transfer-Encoding: chunked\r\n\r\n";
        // Chunks of up to 16 bytes, so a body crosses chunk boundaries.
        static const char* hex = "0123456789abcdef";
        for (std::size_t i = 0; i < body.size(); i += 16) {
            const std::size_t n = std::min<std::size_t>(16, body.size() - i);
            if (n == 16) request += "10";
            else request += hex[n];
            request += "\r\n";
            request.append(body.substr(i, n));
            request += "\r\n";
        }
        request += "0\r\n\r\n";
    } else {
        if (!body.empty() || method == 1) request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
        request += "\r\n";
        request.append(body);
    }
    return {std::move(request), single, body};
}

// Whether forward() would read this body as a request for a stream, as it decides.
bool asks_for_stream(std::string_view body) {
    const nlohmann::json doc = http::parse_json_body(body).value;
    if (!doc.is_object()) return false;
    const auto flag = doc.find("stream");
    return flag != doc.end() && flag->is_boolean() && flag->get<bool>();
}

void run(const char* name, http::GuardedServer& server, const std::string& request, bool head_sent) {
    std::string out;
    try {
        out = server.handle_bytes(request);
    } catch (...) {
        violation("handle_bytes threw");
    }
    // ANVIL_FUZZ_HTTP_SHOW=1 prints what each server was sent and answered (to replay a crash, or
    // see what a seed reaches): fuzz_http FILE...
    static const bool show = std::getenv("ANVIL_FUZZ_HTTP_SHOW") != nullptr;
    if (show) std::fprintf(stderr, "---- %s <<<\n%s\n---- %s >>>\n%s\n", name, request.c_str(), name, out.c_str());
    check_responses(out, head_sent);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    servers();
    return 0;
}

// The framing the connection gate reads before a worker does: a chunked body's end found in one
// scan and in many small feeds must agree, and lie within the bytes given.
void check_chunked_scan(const std::string& request) {
    const http::RequestHead head = http::parse_request_head(request);
    if (head.state != http::RequestHead::State::complete || head.framing != http::BodyFraming::chunked) return;
    const std::string_view body = std::string_view(request).substr(head.length);
    http::ChunkedBodyScan whole(256), pieces(256);
    const auto state = whole.feed(body);
    auto piecewise = http::ChunkedBodyScan::State::more;
    for (std::size_t n = 0; piecewise == http::ChunkedBodyScan::State::more && n <= body.size(); n += 7)
        piecewise = pieces.feed(body.substr(0, n));
    if (piecewise == http::ChunkedBodyScan::State::more) piecewise = pieces.feed(body);
    if (state != piecewise) violation("a chunked body's scan differs fed whole and in pieces");
    if (state == http::ChunkedBodyScan::State::complete && (whole.end() != pieces.end() || whole.end() > body.size() || whole.data_bytes() > whole.end()))
        violation("a chunked body's end is not where both scans put it, or past the bytes given");
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    Servers& s = servers();
    const bool raw = data[0] >= 'A' && data[0] <= 'Z';
    const Built built = raw ? Built{std::string(reinterpret_cast<const char*>(data), size), false, {}}
                            : build_request(data[0], std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
    // A target may hold CRLFs and with them more requests, pipelined: any of them may be a HEAD.
    const bool head_sent = built.request.find("HEAD") != std::string::npos;
    check_chunked_scan(built.request);
    run("api", s.api->http(), built.request, head_sent);
    run("endpoint", s.endpoint->http(), built.request, head_sent);
    if (built.single && !asks_for_stream(built.body)) run("endpoint (refused upstream)", s.refused->http(), built.request, head_sent);
    return 0;
}
