// The settings the ledger keeps, typed: the operator's promotion pin and freeze, and the last
// promotion (what a rollback returns to). Their keys and JSON live here and nowhere else; the JSON is
// what anvild has written under these keys since schema 4, so existing ledgers read back unchanged.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "state/records.hpp"

namespace anvil::state {

inline constexpr std::string_view kPromotionPinKey = "promotion.pin";
inline constexpr std::string_view kPromotionFreezeKey = "promotion.freeze";
inline constexpr std::string_view kLastPromotionKey = "promotion.last";

// A recipe an operator made the default: nothing automatic changes the default while it holds.
struct PromotionPin {
    std::string recipe_id;
    Id revision_id = 0;
    std::string actor;
    std::string at;  // ISO 8601, as now_iso8601()
    bool operator==(const PromotionPin&) const = default;
};

// Automatic promotion held, by an operator or by an automatic rollback.
struct PromotionFreeze {
    std::string reason;
    std::string actor;
    std::string at;
    bool operator==(const PromotionFreeze&) const = default;
};

struct LastPromotion {
    Id revision_id = 0;
    std::string recipe_id;
    std::string at;
    std::optional<Id> previous_revision_id;  // the default it replaced: the rollback target
    bool operator==(const LastPromotion&) const = default;
};

// Reading is lenient as the daemon always was: a missing field reads as empty (or 0, or none).
void to_json(nlohmann::json& j, const PromotionPin& pin);
void from_json(const nlohmann::json& j, PromotionPin& pin);
void to_json(nlohmann::json& j, const PromotionFreeze& freeze);
void from_json(const nlohmann::json& j, PromotionFreeze& freeze);
void to_json(nlohmann::json& j, const LastPromotion& last);
void from_json(const nlohmann::json& j, LastPromotion& last);

}  // namespace anvil::state
