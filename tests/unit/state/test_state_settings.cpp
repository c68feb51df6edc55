// The typed promotion settings: round trips, the JSON anvild has always written under their keys
// (byte for byte), and values written that way read back typed.
#include <catch2/catch.hpp>

#include "state/settings.hpp"
#include "state/inspection.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace anvil::state;
using anvil::test::TempDir;
using nlohmann::json;

namespace {

std::string stored_text(const std::filesystem::path& db, std::string_view key) {
    Connection raw(db, OpenMode::read_only);
    Statement s(raw, "SELECT value FROM settings WHERE key = ?");
    s.bind(1, std::string(key));
    return s.step() ? s.text(0) : std::string();
}

}  // namespace

TEST_CASE("promotion settings round-trip through the ledger", "[state][settings]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    CHECK_FALSE(store.pin());
    CHECK_FALSE(store.freeze());
    CHECK_FALSE(store.last_promotion());

    const PromotionPin pin{"recipe-a", 7, "api:ops", "2026-11-30T06:14:00.123Z"};
    store.set_pin(pin);
    CHECK(store.pin() == pin);
    const PromotionFreeze freeze{"automatic rollback: it crashed", "reconciler", "2026-11-30T06:15:00.000Z"};
    store.set_freeze(freeze);
    CHECK(store.freeze() == freeze);
    const LastPromotion first{3, "recipe-b", "2026-11-30T06:16:00.000Z", std::nullopt};
    store.set_last_promotion(first, "reconciler");
    CHECK(store.last_promotion() == first);
    const LastPromotion second{7, "recipe-a", "2026-11-30T06:17:00.000Z", Id{3}};
    store.set_last_promotion(second, "api:ops");
    CHECK(store.last_promotion() == second);

    // A clear says whether there was something to clear, and only a real one is an event.
    const auto events_before = store.feed_since({}, 1000).size();
    CHECK(store.clear_pin("cli"));
    CHECK_FALSE(store.pin());
    CHECK_FALSE(store.clear_pin("cli"));
    CHECK(store.clear_freeze("cli"));
    CHECK_FALSE(store.freeze());
    const auto feed = store.feed_since({}, 1000);
    CHECK(feed.size() == events_before + 2);
    CHECK(feed.back().message == "cli cleared promotion.freeze");
    CHECK(feed.back().data == json{{"key", "promotion.freeze"}, {"value", nullptr}, {"actor", "cli"}});
}

TEST_CASE("typed settings are stored as the JSON anvild wrote before, and read what it wrote", "[state][settings]") {
    TempDir tmp;
    const auto file = tmp / "state.db";
    Store store(file);
    // What the reconciler has written under each key, built as it builds them.
    const json pin_json = {{"recipe_id", "recipe-a"}, {"revision_id", 7}, {"actor", "api:ops"}, {"at", "2026-11-30T06:14:00.123Z"}};
    const json freeze_json = {{"reason", "frozen through the API"}, {"actor", "api:ops"}, {"at", "2026-11-30T06:15:00.000Z"}};
    const json last_json = {{"revision_id", 7}, {"recipe_id", "recipe-a"}, {"at", "2026-11-30T06:16:00.000Z"}, {"previous_revision_id", 3}};
    const json first_json = {{"revision_id", 3}, {"recipe_id", "recipe-b"}, {"at", "2026-11-30T06:13:00.000Z"}, {"previous_revision_id", nullptr}};

    anvil::state::Inspection(store).set_setting("promotion.pin", pin_json, "api:ops");
    anvil::state::Inspection(store).set_setting("promotion.freeze", freeze_json, "api:ops");
    anvil::state::Inspection(store).set_setting("promotion.last", first_json, "reconciler");
    CHECK(store.pin() == PromotionPin{"recipe-a", 7, "api:ops", "2026-11-30T06:14:00.123Z"});
    CHECK(store.freeze() == PromotionFreeze{"frozen through the API", "api:ops", "2026-11-30T06:15:00.000Z"});
    CHECK(store.last_promotion() == LastPromotion{3, "recipe-b", "2026-11-30T06:13:00.000Z", std::nullopt});
    anvil::state::Inspection(store).set_setting("promotion.last", last_json, "reconciler");
    CHECK(store.last_promotion()->previous_revision_id == Id{3});

    // And the typed setters write those bytes again.
    const std::string pin_text = stored_text(file, kPromotionPinKey), freeze_text = stored_text(file, kPromotionFreezeKey),
                      last_text = stored_text(file, kLastPromotionKey);
    store.set_pin(*store.pin());
    store.set_freeze(*store.freeze());
    store.set_last_promotion(*store.last_promotion(), "reconciler");
    CHECK(stored_text(file, kPromotionPinKey) == pin_text);
    CHECK(stored_text(file, kPromotionFreezeKey) == freeze_text);
    CHECK(stored_text(file, kLastPromotionKey) == last_text);
    store.set_last_promotion({3, "recipe-b", "2026-11-30T06:13:00.000Z", std::nullopt}, "reconciler");
    CHECK(stored_text(file, kLastPromotionKey) == first_json.dump());

    // A value missing fields reads as empty ones, as the daemon's lenient reads always did.
    anvil::state::Inspection(store).set_setting("promotion.freeze", json::object(), "cli");
    CHECK(store.freeze() == PromotionFreeze{});
}
