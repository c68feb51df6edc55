// State store speed: transitions inserted in batches (target ≥ 50,000/s) and the filtered recipe
// list over 10,000 recipes (target p99 under 2 ms). The baseline, measured in the same run, is a
// bare SQLite insert of the same number of rows into a table of the same shape: the ratio says
// what the ledger's guards, status cache and event feed cost on top of SQLite itself.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "registry/document.hpp"
#include "state/sqlite.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace anvil::state;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int main(int argc, char** argv) {
    const long transitions = argc > 1 ? std::stol(argv[1]) : 1000000;
    const int recipes = argc > 2 ? std::stoi(argv[2]) : 10000;
    constexpr int kBatch = 1000;
    test::TempDir tmp;
    Store store(tmp / "state.db");

    auto base = nlohmann::json::parse(test::seed_text("003_"));
    std::vector<registry::Document> docs;
    for (int i = 0; i < recipes; ++i) {
        base["data"]["id"] = "bench-" + std::to_string(i);
        base["data"]["engine"]["name"] = i % 3 == 0 ? "sglang" : "vllm";
        docs.push_back(registry::parse_document(base.dump(), {"bench", std::string(40, 'a'), "r/" + std::to_string(i) + ".json", std::string(40, 'b'), ""}));
    }
    std::vector<const registry::Document*> pointers;
    for (const auto& d : docs) pointers.push_back(&d);
    auto start = Clock::now();
    std::vector<Id> revisions;
    for (const auto& ingested : store.ingest_revisions(0, pointers)) revisions.push_back(ingested.revision_id);
    const double ingest_s = seconds_since(start);

    // candidate → qualifying, then qualifying ⇄ failed: legal moves, forever.
    std::vector<Status> state(revisions.size(), Status::candidate);
    std::vector<TransitionRequest> batch;
    batch.reserve(kBatch);
    start = Clock::now();
    for (long done = 0; done < transitions;) {
        batch.clear();
        for (int i = 0; i < kBatch && done < transitions; ++i, ++done) {
            const std::size_t r = static_cast<std::size_t>(done) % revisions.size();
            const Status to = state[r] == Status::qualifying ? Status::failed : Status::qualifying;
            state[r] = to;
            batch.push_back({revisions[r], to, "bench", "reconciler", {}, {}, std::nullopt});
        }
        store.transition_batch(batch);
    }
    const double ledger_s = seconds_since(start);

    // Baseline: the same number of rows into a bare table, same batching, same durability.
    {
        Connection raw(tmp / "baseline.db", OpenMode::read_write_create);
        raw.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;");
        raw.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, revision_id INTEGER, from_status TEXT, to_status TEXT, reason TEXT, "
                 "evidence_ids TEXT, verdict_ids TEXT, commit_id TEXT, actor TEXT, created_at TEXT)");
        Statement insert(raw, "INSERT INTO t (revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, actor, created_at) "
                              "VALUES (?, 'qualifying', 'failed', 'bench', '[]', '[]', 'reconciler', ?)");
        start = Clock::now();
        for (long done = 0; done < transitions;) {
            Transaction tx(raw);
            for (int i = 0; i < kBatch && done < transitions; ++i, ++done) {
                insert.bind(1, static_cast<std::int64_t>(done)).bind(2, now_iso8601());
                insert.run();
            }
            tx.commit();
        }
    }
    const double baseline_s = seconds_since(start);

    // List queries with filters, as the API will run them.
    std::vector<RecipeFilter> filters(4);
    filters[0].status = "failed";
    filters[0].limit = 100;
    filters[1].engine = "sglang";
    filters[1].offset = 500;
    filters[2].text = "bench-77";
    filters[3].status = "failed";
    filters[3].engine = "vllm";
    filters[3].pinned = true;
    std::vector<double> latencies;
    for (int i = 0; i < 4000; ++i) {
        auto t = Clock::now();
        auto page = store.list_recipes(filters[static_cast<std::size_t>(i) % filters.size()]);
        latencies.push_back(seconds_since(t) * 1000.0);
        if (page.items.empty() && i % 4 != 2) {
            std::fprintf(stderr, "a listing came back empty\n");
            return 1;
        }
    }
    for (std::size_t f = 0; f < filters.size(); ++f) {
        std::vector<double> mine;
        for (std::size_t i = f; i < latencies.size(); i += filters.size()) mine.push_back(latencies[i]);
        std::sort(mine.begin(), mine.end());
        std::printf("  filter %zu: p50 %.3f ms p99 %.3f ms\n", f, mine[mine.size() / 2], mine[mine.size() * 99 / 100]);
    }
    std::sort(latencies.begin(), latencies.end());
    const double p50 = latencies[latencies.size() / 2], p99 = latencies[latencies.size() * 99 / 100];

    const double rate = static_cast<double>(transitions) / ledger_s;
    const double baseline_rate = static_cast<double>(transitions) / baseline_s;
    std::printf("state store: %d recipes ingested in %.2f s\n", recipes, ingest_s);
    std::printf("  transitions: %ld in %.2f s = %.0f/s batched by %d (target >= 50000/s: %s)\n", transitions, ledger_s, rate, kBatch,
                rate >= 50000 ? "met" : "MISSED");
    std::printf("  baseline bare SQLite inserts: %.0f/s; ledger/baseline = %.2f\n", baseline_rate, rate / baseline_rate);
    std::printf("  list query over %d recipes: p50 %.3f ms, p99 %.3f ms (target p99 < 2 ms: %s)\n", recipes, p50, p99,
                p99 < 2.0 ? "met" : "MISSED");
    return 0;
}
