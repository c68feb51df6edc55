#include "daemon/drivers/readiness.hpp"

#include <httplib.h>

#include <thread>

#include <nlohmann/json.hpp>

namespace anvil::drivers {

namespace {

httplib::Client client(const std::string& host, int port, std::chrono::milliseconds timeout) {
    httplib::Client c(host, port);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
    c.set_connection_timeout(0, us);
    c.set_read_timeout(0, us);
    c.set_write_timeout(0, us);
    return c;
}

}  // namespace

bool health_ok(const std::string& host, int port, std::chrono::milliseconds timeout) {
    auto c = client(host, port, timeout);
    auto res = c.Get("/health");
    return res && res->status == 200;
}

bool models_list(const std::string& host, int port, const std::string& model, std::chrono::milliseconds timeout,
                 const std::string& api_key) {
    auto c = client(host, port, timeout);
    if (!api_key.empty()) c.set_bearer_token_auth(api_key.c_str());
    auto res = c.Get("/v1/models");
    if (!res || res->status != 200) return false;
    const auto body = nlohmann::json::parse(res->body, nullptr, false);
    if (!body.is_object() || !body.contains("data") || !body["data"].is_array()) return false;
    for (const auto& m : body["data"])
        if (m.is_object() && m.value("id", "") == model) return true;
    return false;
}

void wait_ready(Driver& driver, const EngineHandle& engine, std::chrono::milliseconds timeout, std::size_t log_lines,
                const std::atomic<bool>* cancelled) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + timeout;
    const auto poll = std::chrono::milliseconds(1000);
    auto pause = std::chrono::milliseconds(2);
    std::string last = "no answer on /health yet";
    for (;;) {
        if (cancelled && cancelled->load())
            throw StartCancelled("engine " + engine.engine_id + " (recipe " + engine.recipe.recipe_id + "): start called off before it was ready");
        const Probe p = driver.probe(engine);
        if (p.state != RunState::running) {
            const std::string code = p.exit_code ? "exited with code " + std::to_string(*p.exit_code) : "is gone";
            throw EngineError("engine " + engine.engine_id + " (recipe " + engine.recipe.recipe_id + ") " + code +
                              " before it was ready; last log lines:\n" + driver.logs(engine, log_lines));
        }
        if (p.healthy) {
            if (models_list(engine.host, engine.port, engine.served_model_name, poll, engine.api_key)) return;
            last = "/health answers 200 but /v1/models does not list '" + engine.served_model_name + "'";
        }
        if (clock::now() >= deadline)
            throw EngineError("engine " + engine.engine_id + " (recipe " + engine.recipe.recipe_id + ") not ready after " +
                              std::to_string(timeout.count()) + " ms: " + last + "; raise the recipe's launch.ready_timeout_seconds (or anvild's engine_ready_timeout_seconds) or read " +
                              engine.log_path.string());
        std::this_thread::sleep_for(pause);
        // Start fast (a tiny model loads in milliseconds), back off for engines that take minutes.
        pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
}

}  // namespace anvil::drivers
