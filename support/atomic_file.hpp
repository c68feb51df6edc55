// A file written whole or not at all, and durably: a crash or power cut leaves the previous
// version or the new one, never a torn mix, and once this returns the new one survives.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>

namespace anvil::support {

// Writes `bytes` to a new temporary file beside `path` (same directory, so the rename is atomic),
// fsyncs it, renames it over `path` and fsyncs the directory so the new name is durable too.
// `mode` is open(2)'s: the process umask still applies. The directory must exist: callers decide
// whether creating it is right. Throws std::system_error naming `path` and the step that failed;
// on failure the temporary file is removed and `path` is untouched (unless only the directory's
// fsync failed: the rename is done but may not survive a power cut).
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, mode_t mode = 0600);

}  // namespace anvil::support
