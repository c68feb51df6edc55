// Receipts: the JSON record of one qualification run, written atomically so that a crash leaves
// either the whole file or none, and hashed so evidence rows can point at exactly these bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace anvil::qualify::detail {

struct WrittenReceipt {
    std::filesystem::path path;
    std::string sha256;  // of the bytes on disk, 64 lowercase hex digits
};

// Writes `receipt` as <dir>/<recipe id>-<revision id>-<time>.json (a temporary file in `dir`,
// fsync, rename, fsync of `dir`). Characters unsafe in a file name become '_'; a name already
// taken gets a counter. Throws std::runtime_error naming the path and the system's reason.
WrittenReceipt write_receipt(const std::filesystem::path& dir, const std::string& recipe_id, std::int64_t revision_id,
                             const nlohmann::json& receipt);

}  // namespace anvil::qualify::detail
