// Readiness: an engine is ready only when /health answers 200 and /v1/models lists the served model
// id its recipe promises. An engine that exits while starting fails at once, with its exit code and
// the last lines of its log; one that is still not ready at the deadline fails with the reason.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "daemon/drivers/driver.hpp"

namespace anvil::drivers {

// GET http://host:port/health answered 200 within `timeout`.
bool health_ok(const std::string& host, int port, std::chrono::milliseconds timeout);
// GET /v1/models answered 200 with `model` among data[].id.
bool models_list(const std::string& host, int port, const std::string& model, std::chrono::milliseconds timeout,
                 const std::string& api_key = "");

// The wait for readiness was called off (`*cancelled` became true): the caller is stopping.
struct StartCancelled : EngineError {
    using EngineError::EngineError;
};

// Polls until ready; throws EngineError otherwise. `log_lines` lines of the log go into the error.
// With `cancelled`, a wait of minutes (a large model loading) ends within a poll once it is set.
void wait_ready(Driver& driver, const EngineHandle& engine, std::chrono::milliseconds timeout,
                std::size_t log_lines = 20, const std::atomic<bool>* cancelled = nullptr);

}  // namespace anvil::drivers
