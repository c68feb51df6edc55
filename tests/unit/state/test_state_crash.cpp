// Nothing lost: a child performing transitions is killed with SIGKILL at random moments, 200 times
// on the same file (60 under AddressSanitizer, where each child's start costs five times as much:
// what the kills test is SQLite's and the store's transactions, which the gcc build runs in full). After each kill the file is intact, every transition the child saw committed is
// there, nothing half-written is visible, and the derived statuses match the ledger.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <set>

#include "state/sqlite.hpp"
#include "state/inspection.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace anvil::state;

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr int kRuns = 60;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kRuns = 60;
#else
constexpr int kRuns = 200;
#endif
#else
constexpr int kRuns = 200;
#endif
}  // namespace

TEST_CASE("SIGKILL at random moments loses no committed transition and shows no half-written one", "[state][crash]") {
    test::TempDir tmp;
    const std::string db = (tmp / "state.db").string();
    std::mt19937 rng(20261130);
    std::set<Id> acknowledged;
    std::size_t total_runs = 0;
    for (int run = 0; run < kRuns; ++run) {
        test::ChildProcess child({ANVIL_STATE_TORTURE, "crash", db, std::to_string(rng())});
        // Kill after a random number of acknowledged commits (0 means: while it is still opening).
        const int wait_for = static_cast<int>(rng() % 40);
        std::string line;
        for (int seen = 0; seen < wait_for && child.read_line(line, 5000);) {
            if (line.rfind("T ", 0) == 0) {
                acknowledged.insert(std::stoll(line.substr(2)));
                ++seen;
            }
        }
        child.kill(SIGKILL);
        // Lines already in the pipe were committed before the kill: they count too.
        while (child.read_line(line, 50))
            if (line.rfind("T ", 0) == 0) acknowledged.insert(std::stoll(line.substr(2)));
        child.wait();
        ++total_runs;

        Store store(db);
        REQUIRE(anvil::state::Inspection(store).integrity_check() == "ok");
        std::set<Id> present;
        for (const auto& t : anvil::state::Inspection(store).transitions_since(0, 1 << 30)) present.insert(t.id);
        std::vector<Id> lost;
        std::set_difference(acknowledged.begin(), acknowledged.end(), present.begin(), present.end(), std::back_inserter(lost));
        INFO("run " << run << ": acknowledged transitions missing from the ledger");
        REQUIRE(lost.empty());
        REQUIRE(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
        // A transition writes its ledger row and the status cache in one transaction: a half-written
        // one would show as a cache row pointing at anything but the newest ledger row.
        Connection raw(db, OpenMode::read_only);
        Statement torn(raw, "SELECT count(*) FROM revision_status s WHERE s.last_transition_id != "
                            "(SELECT max(id) FROM transitions t WHERE t.revision_id = s.revision_id)");
        REQUIRE(torn.step());
        REQUIRE(torn.integer(0) == 0);
        std::size_t promoted = 0;
        for (const auto& [_, s] : anvil::state::Inspection(store).statuses())
            if (s == Status::promoted) ++promoted;
        REQUIRE(promoted <= 1);
    }
    CHECK(total_runs == kRuns);
    CHECK(acknowledged.size() > static_cast<std::size_t>(kRuns) * 5);  // thousands of transitions in all (about 20 a run)
}
