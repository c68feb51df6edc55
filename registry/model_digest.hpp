// The content digest that pins a model for the embedded engine. A directory: sha256 over the sorted
// list of (relative path, sha256 of the file) for every regular file, hidden files excluded. One
// file (GGUF): the sha256 of its bytes.
#pragma once

#include <filesystem>
#include <string>

namespace anvil::registry {

// "sha256:<64 hex>". Throws std::runtime_error naming the path when it cannot be read.
std::string model_digest(const std::filesystem::path& directory);

}  // namespace anvil::registry
