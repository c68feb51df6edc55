#include "daemon/drivers/embedded_driver.hpp"

namespace anvil::drivers {

namespace {

// anvil-engine's flags for the recipe's launch.draft: one draft flag and --draft-tokens K.
std::vector<std::string> draft_flags(const ResolvedLaunch& launch) {
    if (!launch.draft) return {};
    const registry::Draft& d = *launch.draft;
    auto needs = [&](const char* field) {
        return LaunchError("recipe " + launch.recipe_id + ": a " + std::string(registry::to_string(d.kind)) + " draft needs /launch/draft/" + field);
    };
    std::vector<std::string> flags;
    switch (d.kind) {
        case registry::DraftKind::self:
            if (!d.weights) throw needs("weights");
            flags = {"--draft-self", *d.weights};
            break;
        case registry::DraftKind::model:
            if (!launch.draft_model_path) throw needs("model/path");
            flags = {"--draft-model", launch.draft_model_path->string()};
            if (d.weights) flags.insert(flags.end(), {"--draft-weights", *d.weights});
            break;
        case registry::DraftKind::layers:
            if (!d.layers) throw needs("layers");
            flags = {"--draft-layers", std::to_string(*d.layers)};
            break;
        case registry::DraftKind::ngram:
            if (!d.ngram) throw needs("ngram");
            flags = {"--draft-ngram", std::to_string(*d.ngram)};
            break;
    }
    flags.insert(flags.end(), {"--draft-tokens", std::to_string(d.tokens)});
    return flags;
}

}  // namespace

std::vector<std::string> embedded_argv(const std::filesystem::path& engine_binary, const ResolvedLaunch& launch) {
    if (!launch.model_path)
        throw LaunchError("recipe " + launch.recipe_id + ": an embedded launch needs /launch/model/path");
    // The flags anvil owns (registry/owned_flags) first; the recipe's arguments name none of them
    // (refused on paper and by resolve_launch), and anvil-engine refuses a flag given twice.
    std::vector<std::string> argv = {engine_binary.string(), "serve", "--model", launch.model_path->string()};
    if (!launch.served_model_name.empty()) argv.insert(argv.end(), {"--served-model-name", launch.served_model_name});
    const auto draft = draft_flags(launch);
    argv.insert(argv.end(), draft.begin(), draft.end());
    // A recipe that runs on GPUs runs the engine on the first it can see: the one given (the process
    // driver makes the given GPUs the only ones visible, CUDA_VISIBLE_DEVICES by UUID), a Slurm
    // job's first, or else the machine's first. The recipe cannot choose (--device is anvil's).
    if (launch.gpu_count > 0) argv.insert(argv.end(), {"--device", "cuda:0"});
    for (const std::string& s : {std::string("--host"), launch.host, std::string("--port"), std::to_string(launch.port)})
        argv.push_back(s);
    argv.insert(argv.end(), launch.arguments.begin(), launch.arguments.end());
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

}  // namespace anvil::drivers
