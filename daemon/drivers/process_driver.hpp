// The process driver: runs any native command (a llama.cpp or vLLM binary on the host) as an engine,
// from the resolved argv and environment, in its own process group, with size-capped logs and a
// record (pid + start time) that lets a restarted supervisor adopt it.
#pragma once

#include <map>
#include <mutex>
#include <optional>

#include "daemon/drivers/driver.hpp"

namespace anvil::drivers {

struct ProcessDriverOptions {
    std::filesystem::path state_dir;       // one sub-directory per engine: record, engine.log, exit code
    std::size_t log_cap_bytes = 16u << 20;  // per log part; two parts are kept
    std::string kind = "process";          // the name records carry; the embedded driver reuses this one
};

class ProcessDriver : public Driver {
public:
    explicit ProcessDriver(ProcessDriverOptions options);
    std::string kind() const override { return options_.kind; }
    EngineHandle start(const RecipeRevision& recipe, const ResolvedLaunch& launch) override;
    Probe probe(const EngineHandle& engine) override;
    void stop(const EngineHandle& engine, std::chrono::milliseconds grace) override;
    std::vector<EngineHandle> adopt() override;
    std::string logs(const EngineHandle& engine, std::size_t tail) override;

    // Starts `argv` as given (the embedded driver builds it; the process driver takes the launch's).
    EngineHandle start_command(const RecipeRevision& recipe, const ResolvedLaunch& launch, const std::vector<std::string>& argv);

private:
    enum class Life { running, exited, missing };
    // Reaps the keeper when it is this process's child; otherwise reads /proc and the exit-code file.
    Life life(const EngineHandle& engine, std::optional<int>& exit_code);

    ProcessDriverOptions options_;
    std::mutex mutex_;
    std::map<pid_t, int> reaped_;  // keeper pid → exit code, for children this driver reaped
};

}  // namespace anvil::drivers
