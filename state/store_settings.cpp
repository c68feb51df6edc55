// The store's settings: an operator's decisions (promotion pin, freeze) and the last promotion, each
// change written with its actor and as an event.
#include "state/store_impl.hpp"

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

void Store::set_setting(const std::string& key, const json& value, const std::string& actor) {
    write("a setting", [&] {
        const std::string now = now_iso8601();
        auto& upsert = impl_->w("INSERT INTO settings (key, value, actor, updated_at) VALUES (?1, ?2, ?3, ?4) "
                                "ON CONFLICT (key) DO UPDATE SET value = ?2, actor = ?3, updated_at = ?4");
        upsert.bind(1, key).bind(2, value.dump()).bind(3, actor).bind(4, now);
        upsert.run();
        auto& event = impl_->w("INSERT INTO events (kind, subject, message, data, created_at) VALUES ('setting', ?, ?, ?, ?)");
        event.bind(1, key).bind(2, actor + " set " + key).bind(3, json{{"key", key}, {"value", value}, {"actor", actor}}.dump()).bind(4, now);
        event.run();
    });
}

void Store::clear_setting(const std::string& key, const std::string& actor) {
    write("a setting", [&] {
        auto& erase = impl_->w("DELETE FROM settings WHERE key = ?");
        erase.bind(1, key);
        erase.run();
        auto& event = impl_->w("INSERT INTO events (kind, subject, message, data, created_at) VALUES ('setting', ?, ?, ?, ?)");
        event.bind(1, key).bind(2, actor + " cleared " + key).bind(3, json{{"key", key}, {"value", nullptr}, {"actor", actor}}.dump());
        event.bind(4, now_iso8601());
        event.run();
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

}  // namespace anvil::state
