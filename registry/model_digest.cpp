#include "registry/model_digest.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "support/digest.hpp"

namespace anvil::registry {

std::string model_digest(const std::filesystem::path& directory) {
    namespace fs = std::filesystem;
    std::error_code ec;
    // One file (a GGUF model): the digest of its bytes, as Ollama and Hugging Face name a blob.
    if (fs::is_regular_file(directory, ec)) return "sha256:" + support::sha256_file_hex(directory);
    if (!fs::is_directory(directory, ec)) throw std::runtime_error(directory.string() + ": not a model directory or file");
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(directory, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with(".")) {
            if (it->is_directory()) it.disable_recursion_pending();
            continue;
        }
        if (it->is_regular_file()) files.push_back(fs::relative(it->path(), directory).generic_string());
    }
    if (ec) throw std::runtime_error(directory.string() + ": " + ec.message());
    if (files.empty()) throw std::runtime_error(directory.string() + ": holds no files to digest");
    std::sort(files.begin(), files.end());
    // Paths are NUL-terminated so that no file name can forge another entry.
    std::string manifest;
    for (const auto& file : files) manifest += file + '\0' + support::sha256_file_hex(directory / file) + '\n';
    return "sha256:" + support::sha256_hex(manifest);
}

}  // namespace anvil::registry
