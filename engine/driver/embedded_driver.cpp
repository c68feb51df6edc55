#include "engine/driver/embedded_driver.hpp"

namespace anvil::driver {

std::vector<std::string> embedded_argv(const std::filesystem::path& engine_binary, const ResolvedLaunch& launch) {
    if (!launch.model_path)
        throw LaunchError("recipe " + launch.recipe_id + ": an embedded launch needs /launch/model/path");
    std::vector<std::string> argv = {engine_binary.string(), "serve", "--model", launch.model_path->string()};
    bool named = false;
    for (const auto& a : launch.arguments) named = named || a == "--served-model-name" || a.starts_with("--served-model-name=");
    if (!named && !launch.served_model_name.empty()) {
        argv.push_back("--served-model-name");
        argv.push_back(launch.served_model_name);
    }
    argv.insert(argv.end(), launch.arguments.begin(), launch.arguments.end());
    // anvil-engine keeps the last value of a repeated flag, so the allocated address wins.
    for (const std::string& s : {std::string("--host"), launch.host, std::string("--port"), std::to_string(launch.port)})
        argv.push_back(s);
    return argv;
}

EmbeddedDriver::EmbeddedDriver(std::filesystem::path engine_binary, ProcessDriverOptions options)
    : binary_(std::move(engine_binary)), processes_([&] {
          options.kind = "embedded";
          return std::move(options);
      }()) {}

EngineHandle EmbeddedDriver::start(const RecipeRevision& recipe, const ResolvedLaunch& launch) {
    if (launch.kind != "embedded")
        throw LaunchError("recipe " + launch.recipe_id + " has launch kind '" + launch.kind + "', not 'embedded'; use the process or container driver");
    return processes_.start_command(recipe, launch, embedded_argv(binary_, launch));
}

}  // namespace anvil::driver
