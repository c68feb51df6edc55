// The API's response cache: a body is served only at the write generation it was stored at.
#include <catch2/catch.hpp>

#include "daemon/anvild/response_cache.hpp"

using anvil::daemon::ResponseCache;

TEST_CASE("a cached body is served only while the generation it was read at holds", "[daemon][api]") {
    ResponseCache cache(2);
    CHECK_FALSE(cache.find("a", 1));
    cache.store("a", 1, "page a at 1");
    REQUIRE(cache.find("a", 1));
    CHECK(*cache.find("a", 1) == "page a at 1");
    CHECK_FALSE(cache.find("a", 2));  // the ledger moved on: the page may be stale
    cache.store("a", 2, "page a at 2");
    CHECK(*cache.find("a", 2) == "page a at 2");
    CHECK_FALSE(cache.find("b", 2));
}

TEST_CASE("a full cache drops what can no longer be served before anything current", "[daemon][api]") {
    ResponseCache cache(2);
    cache.store("old", 1, "x");
    cache.store("a", 2, "a");
    cache.store("b", 2, "b");  // full: the generation-1 entry goes, the current one stays
    CHECK(cache.size() == 2);
    CHECK(cache.find("a", 2));
    CHECK(cache.find("b", 2));
    cache.store("c", 2, "c");  // full of current entries: starts over with just the new one
    CHECK(cache.size() == 1);
    CHECK(cache.find("c", 2));
}
