// Files the daemon writes whole or not at all: a temporary file, fsync, rename, fsync of the
// directory. A crash leaves the previous version or none, never half of one.
#pragma once

#include <filesystem>
#include <string>

namespace anvil::daemon {

void write_atomically(const std::filesystem::path& file, const std::string& text);

}  // namespace anvil::daemon
