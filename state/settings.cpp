#include "state/settings.hpp"

namespace anvil::state {

using nlohmann::json;

void to_json(json& j, const PromotionPin& pin) {
    j = {{"recipe_id", pin.recipe_id}, {"revision_id", pin.revision_id}, {"actor", pin.actor}, {"at", pin.at}};
}

void from_json(const json& j, PromotionPin& pin) {
    pin.recipe_id = j.value("recipe_id", std::string());
    pin.revision_id = j.value("revision_id", Id{0});
    pin.actor = j.value("actor", std::string());
    pin.at = j.value("at", std::string());
}

void to_json(json& j, const PromotionFreeze& freeze) { j = {{"reason", freeze.reason}, {"actor", freeze.actor}, {"at", freeze.at}}; }

void from_json(const json& j, PromotionFreeze& freeze) {
    freeze.reason = j.value("reason", std::string());
    freeze.actor = j.value("actor", std::string());
    freeze.at = j.value("at", std::string());
}

// previous_revision_id is written as null when there was none: the key is always there.
void to_json(json& j, const LastPromotion& last) {
    j = {{"revision_id", last.revision_id}, {"recipe_id", last.recipe_id}, {"at", last.at},
         {"previous_revision_id", last.previous_revision_id ? json(*last.previous_revision_id) : json(nullptr)}};
}

void from_json(const json& j, LastPromotion& last) {
    last.revision_id = j.value("revision_id", Id{0});
    last.recipe_id = j.value("recipe_id", std::string());
    last.at = j.value("at", std::string());
    const auto previous = j.find("previous_revision_id");
    last.previous_revision_id = previous != j.end() && previous->is_number_integer() ? std::optional(previous->get<Id>()) : std::nullopt;
}

}  // namespace anvil::state
