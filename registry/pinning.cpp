#include "registry/pinning.hpp"

#include <algorithm>

namespace anvil::registry {

namespace {
bool lower_hex(std::string_view s, std::size_t length) {
    return s.size() == length &&
           std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
constexpr std::string_view kSha256Prefix = "sha256:";
}  // namespace

bool is_sha256_digest(std::string_view text) {
    return text.starts_with(kSha256Prefix) && lower_hex(text.substr(kSha256Prefix.size()), 64);
}

bool is_commit_id(std::string_view text) { return lower_hex(text, 40); }

std::optional<std::string> image_digest(std::string_view image) {
    auto at = image.rfind('@');
    if (at == std::string_view::npos) return std::nullopt;
    auto digest = image.substr(at + 1);
    if (!is_sha256_digest(digest)) return std::nullopt;
    return std::string(digest);
}

bool is_pinned_image(std::string_view image) { return image_digest(image).has_value(); }

std::string abbreviate(std::string_view id) {
    std::size_t keep = id.starts_with(kSha256Prefix) ? kSha256Prefix.size() + 12 : 12;
    if (id.size() <= keep) return std::string(id);
    return std::string(id.substr(0, keep)) + "…";
}

}  // namespace anvil::registry
