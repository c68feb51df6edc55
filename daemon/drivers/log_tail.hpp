// Reading the end of an engine's size-capped log (engine.log after engine.log.1).
#pragma once

#include <filesystem>
#include <string>

namespace anvil::drivers {

// The last `lines` lines of the log at `path`, continuing into `path`.1 when the current part is short.
std::string log_tail(const std::filesystem::path& path, std::size_t lines);

}  // namespace anvil::drivers
