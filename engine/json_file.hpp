// A model directory's JSON documents (config.json, tokenizer.json, ...), read whole.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace anvil::engine {

// Throws std::runtime_error "FILE: cannot be read" or "FILE: not valid JSON: why".
nlohmann::json read_json_file(const std::filesystem::path& file);

}  // namespace anvil::engine
