#include "daemon/drivers/engine_record.hpp"
#include "support/random.hpp"

#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "support/atomic_file.hpp"

namespace anvil::drivers {

namespace fs = std::filesystem;
using nlohmann::json;

EngineHandle new_engine_handle(const std::string& driver_kind, const RecipeRevision& recipe, const ResolvedLaunch& launch,
                               const fs::path& state_dir) {
    EngineHandle e;
    e.engine_id = recipe.recipe_id + "-" + support::random_hex(4);
    e.driver = driver_kind;
    e.recipe = recipe;
    e.host = launch.host;
    e.port = launch.port;
    e.served_model_name = launch.served_model_name;
    e.api_key = launch.api_key;
    e.directory = state_dir / e.engine_id;
    e.log_path = e.directory / "engine.log";
    fs::create_directories(e.directory);
    return e;
}

void write_record(const EngineHandle& e) {
    const json j = {{"engine_id", e.engine_id},
                    {"driver", e.driver},
                    {"recipe_id", e.recipe.recipe_id},
                    {"revision", e.recipe.revision},
                    {"pid", e.pid},
                    {"start_time", e.start_time},
                    {"container_id", e.container_id},
                    {"job_id", e.job_id},
                    {"host", e.host},
                    {"port", e.port},
                    {"served_model_name", e.served_model_name},
                    {"log_path", e.log_path.string()},
                    {"api_key", e.api_key}};
    // 0600: the record holds the engine's API key.
    try {
        support::write_file_atomically(e.directory / kRecordFile, j.dump(2) + "\n", 0600);
    } catch (const std::system_error& error) {
        throw EngineError(std::string("cannot write the engine record: ") + error.what() + "; check the state directory is writable");
    }
}

std::optional<EngineHandle> read_record(const fs::path& file) {
    std::ifstream in(file);
    if (!in) return std::nullopt;
    std::stringstream text;
    text << in.rdbuf();
    try {
        const json j = json::parse(text.str());
        EngineHandle e;
        e.engine_id = j.at("engine_id").get<std::string>();
        e.driver = j.at("driver").get<std::string>();
        e.recipe = {j.at("recipe_id").get<std::string>(), j.at("revision").get<std::string>()};
        e.pid = j.at("pid").get<int>();
        e.start_time = j.at("start_time").get<std::uint64_t>();
        e.container_id = j.value("container_id", "");
        e.job_id = j.value("job_id", "");
        e.host = j.at("host").get<std::string>();
        e.port = j.at("port").get<int>();
        e.served_model_name = j.value("served_model_name", "");
        e.log_path = j.at("log_path").get<std::string>();
        e.api_key = j.value("api_key", "");
        e.directory = file.parent_path();
        return e;
    } catch (const json::exception& error) {
        spdlog::warn("engine record {} is unreadable ({}); ignoring it", file.string(), error.what());
        return std::nullopt;
    }
}

std::vector<EngineHandle> list_records(const fs::path& state_dir) {
    std::vector<EngineHandle> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(state_dir, ec)) {
        if (!entry.is_directory()) continue;
        if (auto e = read_record(entry.path() / kRecordFile)) out.push_back(std::move(*e));
    }
    return out;
}

void retire_record(const EngineHandle& e) {
    std::error_code ec;
    fs::rename(e.directory / kRecordFile, e.directory / kRetiredRecordFile, ec);
}

}  // namespace anvil::drivers
