#include "engine/json_file.hpp"

#include <fstream>
#include <stdexcept>

namespace anvil::engine {

nlohmann::json read_json_file(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error(file.string() + ": cannot be read");
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(file.string() + ": not valid JSON: " + e.what());
    }
}

}  // namespace anvil::engine
