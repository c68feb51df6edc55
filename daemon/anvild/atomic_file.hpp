// Forwards to support::write_file_atomically (registry/support/atomic_file.hpp), the one atomic
// writer. Kept only while qualification_runner.cpp still calls write_atomically; its owners switch
// to the support function (creating the directory themselves) and then this header goes.
#pragma once

#include <filesystem>
#include <string>

#include "registry/support/atomic_file.hpp"

namespace anvil::daemon {

// The daemon's records, for its user alone (0600); the directory is created when missing.
inline void write_atomically(const std::filesystem::path& file, const std::string& text) {
    std::filesystem::create_directories(file.parent_path());
    support::write_file_atomically(file, text, 0600);
}

}  // namespace anvil::daemon
