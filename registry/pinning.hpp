// Pinning rules: what makes an image, a model revision or a runtime source immutable.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::registry {

// "sha256:" followed by 64 lowercase hex digits.
bool is_sha256_digest(std::string_view text);
// A 40-hex git commit id (lowercase).
bool is_commit_id(std::string_view text);
// An OCI image reference pinned by content: it ends in "@sha256:<64 hex>".
bool is_pinned_image(std::string_view image);
// The "sha256:…" part of a pinned image reference, if any.
std::optional<std::string> image_digest(std::string_view image);
// A digest or commit shortened for messages: "sha256:0f1cdcc8…".
std::string abbreviate(std::string_view id);

// The outcome of the pinning rules for one document: pinned, or the reasons it is not.
struct PinStatus {
    std::vector<std::string> unpinned_reasons;
    bool pinned() const { return unpinned_reasons.empty(); }
};

}  // namespace anvil::registry
