// The embedded driver: runs `anvil-engine serve` from the same build with the recipe's model and
// options, bound to the allocated host and port, through the process driver's guarantees.
#pragma once

#include "daemon/drivers/process_driver.hpp"

namespace anvil::drivers {

// The argv for `anvil-engine serve`: the model, the served name, the draft's flags from launch.draft
// (--draft-self W | --draft-model DIR [--draft-weights W] | --draft-layers N | --draft-ngram N, then
// --draft-tokens K), the recipe's own arguments (flags such as --weights, --kv-dtype, --max-context),
// and the allocated host and port, which win.
std::vector<std::string> embedded_argv(const std::filesystem::path& engine_binary, const ResolvedLaunch& launch);

class EmbeddedDriver : public Driver {
public:
    EmbeddedDriver(std::filesystem::path engine_binary, ProcessDriverOptions options);
    std::string kind() const override { return "embedded"; }
    EngineHandle start(const RecipeRevision& recipe, const ResolvedLaunch& launch) override;
    Probe probe(const EngineHandle& engine) override { return processes_.probe(engine); }
    void stop(const EngineHandle& engine, std::chrono::milliseconds grace) override { processes_.stop(engine, grace); }
    std::vector<EngineHandle> adopt() override { return processes_.adopt(); }
    std::string logs(const EngineHandle& engine, std::size_t tail) override { return processes_.logs(engine, tail); }

private:
    std::filesystem::path binary_;
    ProcessDriver processes_;
};

}  // namespace anvil::drivers
