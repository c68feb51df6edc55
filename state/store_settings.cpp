// The store's settings: an operator's decisions (promotion pin, freeze) and the last promotion, each
// change written with its actor and as an event. The typed accessors keep the JSON of settings.hpp.
#include "state/store_impl.hpp"

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

void Store::Impl::setting_event(const std::string& key, const std::string& message, const json& value, const std::string& actor,
                                const std::string& now) {
    auto& event = w("INSERT INTO events (kind, subject, message, data, created_at) VALUES ('setting', ?, ?, ?, ?)");
    event.bind(1, key).bind(2, message).bind(3, json{{"key", key}, {"value", value}, {"actor", actor}}.dump()).bind(4, now);
    event.run();
}

void Store::set_setting(const std::string& key, const json& value, const std::string& actor) {
    write("a setting", [&] {
        const std::string now = impl_->now();
        auto& upsert = impl_->w("INSERT INTO settings (key, value, actor, updated_at) VALUES (?1, ?2, ?3, ?4) "
                                "ON CONFLICT (key) DO UPDATE SET value = ?2, actor = ?3, updated_at = ?4");
        upsert.bind(1, key).bind(2, value.dump()).bind(3, actor).bind(4, now);
        upsert.run();
        impl_->setting_event(key, actor + " set " + key, value, actor, now);
    });
}

// Checks and clears in one transaction: two operators clearing at once see one of them succeed.
bool Store::clear_setting_if_set(const std::string& key, const std::string& actor) {
    return write("a setting", [&] {
        auto& erase = impl_->w("DELETE FROM settings WHERE key = ?");
        erase.bind(1, key);
        erase.run();
        if (impl_->writer->conn.changes() == 0) return false;
        impl_->setting_event(key, actor + " cleared " + key, nullptr, actor, impl_->now());
        return true;
    });
}

std::optional<json> Store::setting(const std::string& key) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT value FROM settings WHERE key = ?");
    s.bind(1, key);
    std::optional<json> out;
    if (s.step()) out = json::parse(s.text(0));
    s.reset();
    return out;
}

std::optional<PromotionPin> Store::pin() const {
    const auto value = setting(std::string(kPromotionPinKey));
    return value ? std::optional(value->get<PromotionPin>()) : std::nullopt;
}

void Store::set_pin(const PromotionPin& pin) { set_setting(std::string(kPromotionPinKey), pin, pin.actor); }

bool Store::clear_pin(const std::string& actor) { return clear_setting_if_set(std::string(kPromotionPinKey), actor); }

std::optional<PromotionFreeze> Store::freeze() const {
    const auto value = setting(std::string(kPromotionFreezeKey));
    return value ? std::optional(value->get<PromotionFreeze>()) : std::nullopt;
}

void Store::set_freeze(const PromotionFreeze& freeze) { set_setting(std::string(kPromotionFreezeKey), freeze, freeze.actor); }

bool Store::clear_freeze(const std::string& actor) { return clear_setting_if_set(std::string(kPromotionFreezeKey), actor); }

std::optional<LastPromotion> Store::last_promotion() const {
    const auto value = setting(std::string(kLastPromotionKey));
    return value ? std::optional(value->get<LastPromotion>()) : std::nullopt;
}

void Store::set_last_promotion(const LastPromotion& last, const std::string& actor) { set_setting(std::string(kLastPromotionKey), last, actor); }

}  // namespace anvil::state
