// Speculative decoding through anvil-engine serve: over HTTP the output with a draft is the output
// without one, conflicting or impossible draft flags are refused with one clear line, and
// /v1/models and /metrics report the draft and its counters.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/block_manager.hpp"
#include "engine/draft.hpp"
#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/scheduler.hpp"
#include "engine/server.hpp"
#include "speculative_fixture.hpp"
#include "test_engine_helpers.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

// The cases sit in the fixture's namespace: in a unity build another file's helpers of the same
// names stay out of their way.
namespace anvil::test::speculative {

namespace {

// ---------------------------------------------------------------------------------------------
// anvil-engine as a child process.

// `anvil-engine serve` with the flags, its log quiet but for warnings and errors.
std::vector<std::string> serve_argv(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {"env", "ANVIL_LOG=warn", ANVIL_ENGINE, "serve"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
}

// The lines of a refused serve's output that are not the listening line printed before loading.
std::vector<std::string> error_lines(const std::string& output) {
    std::vector<std::string> lines;
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty() && line.find("listening on http://") == std::string::npos) lines.push_back(line);
    return lines;
}

// `line` contains `message`, where each '*' in the message stands for a number.
bool matches(const std::string& line, const std::string& message) {
    for (size_t from = 0; from < line.size(); ++from) {
        size_t at = from, i = 0;
        for (; i < message.size() && at <= line.size(); ++i) {
            if (message[i] == '*') {
                const size_t start = at;
                while (at < line.size() && std::isdigit(static_cast<unsigned char>(line[at]))) ++at;
                if (at == start) break;
            } else if (at < line.size() && line[at] == message[i]) {
                ++at;
            } else {
                break;
            }
        }
        if (i == message.size()) return true;
    }
    return false;
}

class ServedBinary {
public:
    explicit ServedBinary(const std::vector<std::string>& flags) : child_(serve_argv(flags)) {
        const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
        std::string line;
        while (port_ == 0 && child_.read_line(line, 60000)) {
            std::smatch m;
            if (std::regex_search(line, m, listening)) port_ = std::stoi(m[1]);
        }
        REQUIRE(port_ > 0);
        int status = 0;
        for (int i = 0; i < 3000 && status != 200; ++i) {
            auto h = client().Get("/health");
            status = h ? h->status : 0;
            if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        REQUIRE(status == 200);
    }
    ~ServedBinary() {
        child_.kill(SIGTERM);
        child_.wait();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(120, 0);
        c.set_connection_timeout(30, 0);
        return c;
    }
    json post(const std::string& path, const json& body) const {
        auto res = client().Post(path.c_str(), body.dump(), "application/json");
        REQUIRE(res);
        INFO(res->body);
        REQUIRE(res->status == 200);
        return json::parse(res->body);
    }
    json get(const std::string& path) const {
        auto res = client().Get(path.c_str());
        REQUIRE(res);
        REQUIRE(res->status == 200);
        return json::parse(res->body);
    }
    std::string metrics_text() const {
        auto res = client().Get("/metrics");
        REQUIRE(res);
        REQUIRE(res->status == 200);
        return res->body;
    }

private:
    anvil::test::ChildProcess child_;
    int port_ = 0;
};

// Prometheus text to {"name{labels}": value}.
std::map<std::string, double> parse_metrics(const std::string& text) {
    std::map<std::string, double> out;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.empty() || line[0] == '#') continue;
        const auto space = line.rfind(' ');
        out[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
    return out;
}

// An in-process server for an Engine, on a free loopback port.
struct ServedEngine : anvil::test::engine::InProcessServer {
    ServedEngine(const fs::path& model_dir, const EngineOptions& options)
        : InProcessServer(model_dir, options, server_options()) {}
    static ServerOptions server_options() {
        ServerOptions o;
        o.served_model_name = "tiny";
        o.http_threads = 32;
        o.heartbeat_ms = 5;
        return o;
    }
};


// What a client sees of a response, whole or streamed: each choice's text and finish reason, the
// usage, and for chat with logprobs the tokens' logprobs.
json client_view(const json& body, bool stream, bool chat, const std::string& raw) {
    json view = {{"choices", json::object()}, {"usage", nullptr}};
    auto add = [&](const json& c) {
        json& v = view["choices"][std::to_string(c["index"].get<int>())];
        if (v.is_null()) v = {{"text", ""}, {"finish_reason", nullptr}, {"logprobs", json::array()}};
        if (chat) {
            const json& part = stream ? c["delta"] : c["message"];
            if (part.contains("content") && part["content"].is_string())
                v["text"] = v["text"].get<std::string>() + part["content"].get<std::string>();
        } else {
            v["text"] = v["text"].get<std::string>() + c["text"].get<std::string>();
        }
        if (!c["finish_reason"].is_null()) v["finish_reason"] = c["finish_reason"];
        if (c.contains("logprobs") && !c["logprobs"].is_null()) v["logprobs"].push_back(c["logprobs"]);
    };
    if (!stream) {
        for (const auto& c : body["choices"]) add(c);
        view["usage"] = body["usage"];
        return view;
    }
    const auto events = sse_events(raw);
    REQUIRE(!events.empty());
    CHECK(events.back() == "[DONE]");
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json chunk = json::parse(events[i]);
        for (const auto& c : chunk["choices"]) add(c);
        if (chunk.contains("usage") && !chunk["usage"].is_null()) view["usage"] = chunk["usage"];
    }
    return view;
}

}  // namespace

// =============================================================================================
// 5. The server: lossless over HTTP (streamed and whole), the command line's refusals, and what
// /v1/models and /metrics say.

TEST_CASE("speculative: over HTTP, streamed and whole responses with a draft are those without one", "[speculative][server]") {
    EngineOptions o = engine_options();
    o.max_seqs = 4;
    const std::vector<std::pair<std::string, json>> bodies = {
        {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Tell me about the sea"}}}}, {"max_tokens", 24},
                                  {"temperature", 0}, {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 2}}},
        {"/v1/completions", {{"prompt", "The quick brown fox"}, {"max_tokens", 30}, {"temperature", 0}, {"n", 2}}},
        {"/v1/completions", {{"prompt", "Hello world"}, {"max_tokens", 2}, {"temperature", 0}}},
        {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "What is two plus two?"}}}}, {"max_tokens", 20},
                                  {"temperature", 0}, {"stop", {" two", "e"}}}},
        {"/v1/completions", {{"prompt", "1 2 3 1 2 3 1 2 3"}, {"max_tokens", 17}, {"temperature", 0}, {"ignore_eos", true},
                             {"logprobs", 2}}},
    };
    // Every request twice: whole and streamed (with usage), all at once. The threads only talk
    // HTTP; Catch's assertions stay on this thread (they are not thread-safe).
    const auto views = [&](ServedEngine& served) {
        std::vector<std::future<std::pair<int, std::string>>> replies;
        for (const auto& [path, body] : bodies)
            for (bool stream : {false, true})
                replies.push_back(std::async(std::launch::async, [&, path = path, body = body, stream] {
                    json b = body;
                    if (stream) {
                        b["stream"] = true;
                        b["stream_options"] = {{"include_usage", true}};
                    }
                    auto res = served.client().Post(path.c_str(), b.dump(), "application/json");
                    return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
                }));
        std::vector<json> out;
        for (size_t i = 0; i < replies.size(); ++i) {
            const auto [status, body] = replies[i].get();
            INFO(body);
            REQUIRE(status == 200);
            const bool stream = i % 2 == 1, chat = bodies[i / 2].first == "/v1/chat/completions";
            out.push_back(client_view(stream ? json() : json::parse(body), stream, chat, body));
        }
        return out;
    };
    std::vector<json> expected;
    {
        ServedEngine plain(model("early"), o);
        expected = views(plain);
    }
    for (size_t i = 0; i < expected.size(); i += 2) {
        // Whole and streamed agree on the text, the finish and the usage.
        INFO(expected[i].dump() << "\n" << expected[i + 1].dump());
        CHECK(expected[i]["usage"] == expected[i + 1]["usage"]);
        for (const auto& [index, c] : expected[i]["choices"].items()) {
            CHECK(c["text"] == expected[i + 1]["choices"][index]["text"]);
            CHECK(c["finish_reason"] == expected[i + 1]["choices"][index]["finish_reason"]);
        }
    }
    for (const DraftOptions& d : {draft_layers(1, 4), draft_self(WeightFormat::Q8, 16), draft_ngram(2, 3)}) {
        INFO("draft " << d.describe().dump());
        o.draft = d;
        ServedEngine served(model("early"), o);
        const std::vector<json> got = views(served);
        REQUIRE(got.size() == expected.size());
        for (size_t i = 0; i < got.size(); ++i) {
            INFO(bodies[i / 2].first << " " << bodies[i / 2].second.dump() << (i % 2 ? " streamed" : " whole"));
            CHECK(got[i] == expected[i]);
        }
        check_idle(served.engine());
    }
}

TEST_CASE("speculative: anvil-engine serve refuses impossible or conflicting draft flags with one clear line",
          "[speculative][server]") {
    const std::string target = model("plain").string();
    struct Refusal {
        std::vector<std::string> flags;
        int status;  // 2: a usage error, found in the flags; 1: found loading the models
        std::string message;  // '*' stands for a number
    };
    const std::vector<Refusal> refusals = {
        {{"--draft-self", "q8", "--draft-ngram", "2"}, 2,
         "--draft-self, --draft-model, --draft-layers and --draft-ngram each name a draft; give one"},
        {{"--draft-layers", "1", "--draft-model", model("other-seed").string()}, 2, "each name a draft; give one"},
        {{"--draft-ngram", "2", "--draft-tokens", "0"}, 2, "--draft-tokens 0: expected 1 to 16"},
        {{"--draft-layers", "1", "--draft-tokens", "17"}, 2, "--draft-tokens 17: expected 1 to 16"},
        {{"--draft-layers", "0"}, 2, "--draft-layers 0: expected at least 1"},
        {{"--draft-weights", "q8"}, 2, "--draft-weights applies to --draft-model only"},
        {{"--draft-layers", "2"}, 1,
         "--draft-layers 2: expected 1 to 1 (the model has 2 layers; the draft must be shorter than the target)"},
        {{"--draft-layers", "5"}, 1, "--draft-layers 5: expected 1 to 1"},
        {{"--draft-self", "f32"}, 1, "--draft-self: expected q8 or bf16"},
        {{"--draft-self", "q4"}, 1, "q4"},
        {{"--draft-model", model("small").string()}, 1,
         "its tokenizer is not the target's (vocabulary of * tokens, the target's has *); a draft must share the "
         "target's vocabulary and merges"},
        {{"--draft-model", (model("plain").parent_path() / "missing").string()}, 1, "missing"},
        {{"--draft-ngram", "65"}, 1, "--draft-ngram 65: expected 1 to 64 tokens"},
    };
    REQUIRE(matches("x: vocabulary of 370 tokens", "vocabulary of * tokens"));
    REQUIRE_FALSE(matches("x: vocabulary of many tokens", "vocabulary of * tokens"));
    for (const Refusal& r : refusals) {
        std::vector<std::string> flags = {"--model", target, "--port", "0", "--threads", "1", "--max-context", "128"};
        flags.insert(flags.end(), r.flags.begin(), r.flags.end());
        // Under a timeout: a server that fails to load must exit by itself, not hang.
        std::vector<std::string> argv = {"timeout", "-s", "KILL", "60"};
        for (const auto& a : serve_argv(flags)) argv.push_back(a);
        const auto result = anvil::test::run(argv);
        std::string joined;
        for (const auto& f : r.flags) joined += f + " ";
        INFO(joined << "\n" << result.output);
        CHECK(result.exit_code == r.status);
        const auto lines = error_lines(result.output);
        // One line says what is wrong, naming the flag.
        REQUIRE(lines.size() == 1);
        CHECK(matches(lines[0], r.message));
        CHECK_THAT(lines[0], Catch::StartsWith("anvil-engine serve: "));
    }
}

TEST_CASE("speculative: anvil-engine serve --draft-layers reports the draft in /v1/models and its counters in /metrics",
          "[speculative][server]") {
    ServedBinary served({"--model", model("early").string(), "--port", "0", "--threads", "1", "--max-context", "128",
                         "--max-seqs", "3", "--served-model-name", "early", "--draft-layers", "1", "--draft-tokens", "3"});
    const json models = served.get("/v1/models");
    REQUIRE(models["data"].size() == 1);
    CHECK(models["data"][0]["id"] == "early");
    CHECK(models["data"][0]["draft"] == json({{"kind", "layers"}, {"tokens", 3}, {"layers", 1}}));

    // Before any request the counters are there, at zero.
    auto m = parse_metrics(served.metrics_text());
    const std::string label = "{model=\"early\",draft=\"layers\"}";
    for (const char* name : {"anvil_engine_draft_proposed_tokens_total", "anvil_engine_draft_accepted_tokens_total",
                             "anvil_engine_draft_verifications_total", "anvil_engine_draft_seconds_total",
                             "anvil_engine_draft_acceptance_ratio", "anvil_engine_draft_mean_accepted_tokens"}) {
        INFO(name);
        REQUIRE(m.count(name + label));
        CHECK(m[name + label] == 0);
    }
    const std::string help = served.metrics_text();
    CHECK_THAT(help, Catch::Contains("# TYPE anvil_engine_draft_proposed_tokens_total counter") &&
                         Catch::Contains("# TYPE anvil_engine_draft_acceptance_ratio gauge"));

    std::vector<std::future<std::pair<int, std::string>>> replies;
    for (int i = 0; i < 6; ++i)
        replies.push_back(std::async(std::launch::async, [&, i] {
            const json body = {{"prompt", "The quick brown fox " + std::to_string(i)}, {"max_tokens", 20 + i},
                               {"temperature", i % 2 ? 0.0 : 0.8}, {"seed", i}, {"ignore_eos", true}};
            auto res = served.client().Post("/v1/completions", body.dump(), "application/json");
            return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
        }));
    int generated = 0;
    for (auto& r : replies) {
        const auto [status, body] = r.get();
        INFO(body);
        REQUIRE(status == 200);
        generated += json::parse(body)["usage"]["completion_tokens"].get<int>();
    }
    CHECK(generated == 20 + 21 + 22 + 23 + 24 + 25);
    // A last request served alone: the counters of the earlier ones are complete once it is back.
    served.post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 1}});

    m = parse_metrics(served.metrics_text());
    const double proposed = m["anvil_engine_draft_proposed_tokens_total" + label],
                 accepted = m["anvil_engine_draft_accepted_tokens_total" + label],
                 verifications = m["anvil_engine_draft_verifications_total" + label],
                 ratio = m["anvil_engine_draft_acceptance_ratio" + label],
                 mean = m["anvil_engine_draft_mean_accepted_tokens" + label];
    CAPTURE(proposed, accepted, verifications, ratio, mean);
    CHECK(proposed > 0);
    CHECK(accepted > 0);
    CHECK(proposed >= accepted);
    CHECK(verifications > 0);
    CHECK(proposed <= 3 * verifications);  // at most K a verification
    CHECK(ratio >= 0);
    CHECK(ratio <= 1);
    CHECK(ratio == Approx(accepted / proposed).epsilon(1e-4));  // printed with 6 digits
    CHECK(mean == Approx(accepted / verifications).epsilon(1e-4));
    CHECK(m["anvil_engine_draft_seconds_total" + label] > 0);
    // Every token generated came from a verification or a plain step, and the drafts saved steps:
    // fewer forward passes than tokens.
    CHECK(m["anvil_engine_generation_tokens_total{model=\"early\"}"] == generated + 1);
    CHECK(m["anvil_engine_steps_total{model=\"early\"}"] < generated);
    CHECK(m["anvil_engine_kv_blocks_used{model=\"early\"}"] == 0);
    CHECK(m["anvil_engine_requests_running{model=\"early\"}"] == 0);
}

TEST_CASE("speculative: /v1/models describes each draft kind, and a server without one says nothing of drafts",
          "[speculative][server]") {
    {
        ServedBinary plain({"--model", model("plain").string(), "--port", "0", "--threads", "1", "--max-context", "64"});
        const json models = plain.get("/v1/models");
        CHECK_FALSE(models["data"][0].contains("draft"));
        CHECK_THAT(plain.metrics_text(), !Catch::Contains("anvil_engine_draft"));
    }
    const std::vector<std::pair<std::vector<std::string>, json>> kinds = {
        {{"--draft-self", "q8"}, {{"kind", "self"}, {"tokens", 4}, {"weights", "q8"}}},
        {{"--draft-self", "bf16", "--draft-tokens", "16"}, {{"kind", "self"}, {"tokens", 16}, {"weights", "bf16"}}},
        {{"--draft-model", model("other-seed").string(), "--draft-weights", "bf16", "--draft-tokens", "1"},
         {{"kind", "model"}, {"tokens", 1}, {"model", "other-seed"}, {"weights", "bf16"}}},
        {{"--draft-ngram", "3", "--draft-tokens", "5"}, {{"kind", "ngram"}, {"tokens", 5}, {"ngram", 3}}},
    };
    for (const auto& [flags, draft] : kinds) {
        std::vector<std::string> argv = {"--model", model("plain").string(), "--port", "0", "--threads", "1", "--max-context", "64"};
        argv.insert(argv.end(), flags.begin(), flags.end());
        ServedBinary served(argv);
        INFO(draft.dump());
        CHECK(served.get("/v1/models")["data"][0]["draft"] == draft);
        served.post("/v1/completions", {{"prompt", "1 2 3 1 2 3 1 2"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
        served.post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 1}});
        auto m = parse_metrics(served.metrics_text());
        const std::string label = "{model=\"plain\",draft=\"" + draft["kind"].get<std::string>() + "\"}";
        CHECK(m.count("anvil_engine_draft_proposed_tokens_total" + label));
        CHECK(m["anvil_engine_draft_accepted_tokens_total" + label] <= m["anvil_engine_draft_proposed_tokens_total" + label]);
        CHECK(m["anvil_engine_draft_acceptance_ratio" + label] <= 1);
    }
}

TEST_CASE("speculative: the draft counters never show more tokens accepted than proposed, even read the moment a reply ends",
          "[speculative][metrics]") {
    // A scrape can come at any time; a client that has its reply and scrapes at once is the
    // likeliest to land right after the last verification's tokens were sent.
    Engine engine(model("early"), engine_options(draft_layers(1, 16)));
    const std::vector<int32_t> prompt = engine.tokenizer().encode("The quick brown fox", true);
    int violations = 0;
    for (int i = 0; i < 40; ++i) {
        // Two choices finishing in the same step: this thread is still busy with the first's
        // events when the second's last one arrives, and reads the counters at once.
        auto stream = engine.submit(prompt, greedy(10 + i % 7), 2);
        for (int done = 0; done < 2;) {
            auto event = stream->pop(std::chrono::milliseconds(120000));
            REQUIRE(event);
            if (event->done) ++done;
        }
        const uint64_t accepted = engine.metrics().draft_accepted.load(), proposed = engine.metrics().draft_proposed.load();
        if (accepted > proposed) ++violations;
    }
    CHECK(violations == 0);
    settle(engine);
    CHECK(engine.metrics().draft_accepted.load() <= engine.metrics().draft_proposed.load());
}

}  // namespace anvil::test::speculative
