// The tool-call and needle gates against an engine that does what they ask. No model small enough
// for CI can call tools or retrieve a fact from a long context, so the engine here is a stand-in on
// loopback that answers the way a capable one does (OpenAI's shapes, usage counted as one token per
// four bytes); the same gates against the real tiny model fail (test_qualify_engine.cpp). Together
// they show the gates can both pass and fail, and pass only on the right answers.
#include <catch2/catch.hpp>

#include <regex>
#include <thread>

#include <httplib.h>

#include "loopback_server.hpp"

#include "daemon/qualify/gates.hpp"
#include "daemon/qualify/run_context.hpp"

using namespace anvil::qualify;
using namespace anvil::qualify::detail;
using nlohmann::json;

namespace {

// How the stand-in answers: right, or wrong in one specific way.
enum class Behaviour { capable, wrong_tool_arguments, forgets_needle };

class CapableStandIn {
public:
    explicit CapableStandIn(Behaviour behaviour) : behaviour_(behaviour), server_([this](httplib::Server& http) {
        http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
        http.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(json{{"object", "list"}, {"data", {{{"id", "capable"}, {"object", "model"}}}}}.dump(), "application/json");
        });
        http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
            res.set_content(answer(json::parse(req.body)).dump(), "application/json");
        });
    }) {}
    int port() const { return server_.port(); }

private:
    json answer(const json& body) const {
        const std::string prompt = body["messages"].back()["content"].get<std::string>();
        json message = {{"role", "assistant"}, {"content", ""}};
        std::string finish = "stop";
        if (body.contains("tools")) {
            const json arguments = behaviour_ == Behaviour::wrong_tool_arguments ? json{{"town", "Paris"}} : json{{"city", "Paris"}};
            message["content"] = nullptr;
            message["tool_calls"] = {{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", arguments.dump()}}}}};
            finish = "tool_calls";
        } else {
            // The last needle in the text is the one asked about (there is only ever one).
            std::smatch m;
            std::string content = "I do not know.";
            if (behaviour_ != Behaviour::forgets_needle && std::regex_search(prompt, m, std::regex("The secret number is ([0-9]+)\\.")))
                content = m[1].str();
            message["content"] = content;
        }
        const long long prompt_tokens = static_cast<long long>(prompt.size() / 4 + 8);
        return {{"id", "chatcmpl-1"},
                {"object", "chat.completion"},
                {"model", "capable"},
                {"choices", {{{"index", 0}, {"message", message}, {"finish_reason", finish}}}},
                {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", 4}, {"total_tokens", prompt_tokens + 4}}}};
    }

    Behaviour behaviour_;
    anvil::test::LoopbackServer server_;
};

struct GateRun {
    Target target;
    Plan plan;
    Journal journal;
    std::unique_ptr<RunContext> context;

    explicit GateRun(int port) {
        target.host = "127.0.0.1";
        target.port = port;
        target.model = "capable";
        target.recipe_id = "capable";
        plan.attempts = 2;
        plan.tools = true;
        plan.needle_context = 4096;
        plan.request_timeout = std::chrono::seconds(10);
        context = std::make_unique<RunContext>(target, plan, journal);
    }
};

}  // namespace

TEST_CASE("an engine that calls the tool with the required arguments passes the tool-call gate", "[qualify]") {
    CapableStandIn engine(Behaviour::capable);
    GateRun run(engine.port());
    const GateOutcome tools = tools_gate(*run.context);
    INFO((tools.reasons.empty() ? std::string() : tools.reasons.front()));
    CHECK(tools.pass);
    CHECK(tools.passed == tools.attempts);
}

TEST_CASE("a tool call without the required argument fails the tool-call gate, naming it", "[qualify]") {
    CapableStandIn engine(Behaviour::wrong_tool_arguments);
    GateRun run(engine.port());
    const GateOutcome tools = tools_gate(*run.context);
    CHECK_FALSE(tools.pass);
    REQUIRE_FALSE(tools.reasons.empty());
    CHECK_THAT(tools.reasons.front(), Catch::Contains("lack the required string \"city\""));
}

TEST_CASE("an engine that finds the needle at every depth and length passes the needle gate", "[qualify]") {
    CapableStandIn engine(Behaviour::capable);
    GateRun run(engine.port());
    const GateOutcome needle = needle_gate(*run.context);
    INFO((needle.reasons.empty() ? std::string() : needle.reasons.front()));
    CHECK(needle.pass);
    // Probes at half and at the full context, each at the three depths, every attempt.
    int probes = 0;
    long long longest = 0;
    for (const auto& x : run.journal.exchanges()) {
        if (x["label"] != "needle") continue;
        ++probes;
        if (x.contains("response") && x["response"].is_object() && x["response"].contains("usage"))
            longest = std::max(longest, x["response"]["usage"]["prompt_tokens"].get<long long>());
    }
    CHECK(probes == 2 + 6 * needle.attempts);  // two calibration probes, then 2 lengths × 3 depths per attempt
    CHECK(longest > 4096 * 0.8);
    CHECK(longest <= 4096);
}

TEST_CASE("an engine that answers without the needle fails the needle gate with every miss counted", "[qualify]") {
    CapableStandIn engine(Behaviour::forgets_needle);
    GateRun run(engine.port());
    const GateOutcome needle = needle_gate(*run.context);
    CHECK_FALSE(needle.pass);
    REQUIRE_FALSE(needle.reasons.empty());
    CHECK_THAT(needle.reasons.front(), Catch::Contains("6 of 6 missed") && Catch::Contains("lacks 48213"));
}
