// The receipt file: named by recipe, revision and time, written atomically (support::write_file_atomically), and its sha256.
#include "daemon/qualify/receipt.hpp"

#include <stdexcept>

#include "support/atomic_file.hpp"
#include "support/clock.hpp"
#include "support/digest.hpp"

namespace anvil::qualify::detail {

namespace {

std::string safe_name(const std::string& text) {
    std::string out;
    for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ? c : '_';
    if (out.empty() || out[0] == '.') out.insert(0, "_");
    return out;
}

}  // namespace

WrittenReceipt write_receipt(const std::filesystem::path& dir, const std::string& recipe_id, std::int64_t revision_id,
                             const nlohmann::json& receipt) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create the directory of receipt " + dir.string() + ": " + ec.message());

    // The time in the name has no ':' (not portable in file names) and keeps milliseconds.
    const std::string stamp = support::format_utc_compact(std::chrono::system_clock::now(), support::Precision::milliseconds);
    const std::string stem = safe_name(recipe_id.empty() ? "engine" : recipe_id) + "-" + std::to_string(revision_id) + "-" + stamp;
    std::filesystem::path path = dir / (stem + ".json");
    for (int n = 2; std::filesystem::exists(path); ++n) path = dir / (stem + "-" + std::to_string(n) + ".json");

    const std::string bytes = receipt.dump(2) + "\n";
    support::write_file_atomically(path, bytes, 0644);
    return {path, support::sha256_hex(bytes)};
}

}  // namespace anvil::qualify::detail
