// Registry read speed: a generated git registry of 10,000 recipes read cold, then one changed file
// applied incrementally. Prints both times and their ratio (target: incremental ≥ 100× faster).
#include <chrono>
#include <cstdio>
#include <string>

#include "registry/catalog.hpp"
#include "registry/git_source.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string recipe(const json& base, int i, int revision) {
    json j = base;
    j["data"]["id"] = "bench-recipe-" + std::to_string(i);
    j["data"]["serving"]["max_concurrency"] = 1 + (i + revision) % 8;
    j["data"]["description"] = "generated recipe " + std::to_string(i) + " revision " + std::to_string(revision);
    return j.dump(1);
}

}  // namespace

int main(int argc, char** argv) {
    const int count = argc > 1 ? std::stoi(argv[1]) : 10000;
    const json base = json::parse(anvil::test::seed_text("003_"));
    anvil::test::TempDir tmp;
    anvil::test::GitRepo repo(tmp / "registry");
    for (int i = 0; i < count; ++i) repo.write("recipes/r-" + std::to_string(i) + ".json", recipe(base, i, 0));
    repo.commit("generated registry");

    GitSource source(repo.dir().string(), "main", tmp / "data");
    Catalog catalog;
    auto start = Clock::now();
    const std::string first = source.fetch();
    const double cold_fetch_ms = ms_since(start);
    start = Clock::now();
    auto cold = catalog.apply(source, first);
    const double cold_read_ms = ms_since(start);
    if (cold.added != static_cast<std::size_t>(count)) {
        std::fprintf(stderr, "expected %d documents, read %zu\n", count, cold.added);
        return 1;
    }

    repo.write("recipes/r-42.json", recipe(base, 42, 1));
    repo.commit("change one recipe");
    start = Clock::now();
    const std::string second = source.fetch();
    const double incremental_fetch_ms = ms_since(start);
    start = Clock::now();
    auto incremental = catalog.apply(source, second);
    const double incremental_apply_ms = ms_since(start);
    if (incremental.mode != SyncReport::Mode::incremental || incremental.modified != 1) {
        std::fprintf(stderr, "the second commit was not applied incrementally\n");
        return 1;
    }

    std::printf("registry of %d recipes\n", count);
    std::printf("  cold:        fetch %8.1f ms  read+parse %8.1f ms  total %8.1f ms\n", cold_fetch_ms, cold_read_ms,
                cold_fetch_ms + cold_read_ms);
    std::printf("  incremental: fetch %8.1f ms  diff+apply %8.3f ms  total %8.1f ms\n", incremental_fetch_ms,
                incremental_apply_ms, incremental_fetch_ms + incremental_apply_ms);
    const double apply_ratio = cold_read_ms / incremental_apply_ms;
    const double total_ratio = (cold_fetch_ms + cold_read_ms) / (incremental_fetch_ms + incremental_apply_ms);
    std::printf("  ratio cold/incremental: read %.0fx (target >= 100x: %s), with fetch %.0fx\n", apply_ratio,
                apply_ratio >= 100 ? "met" : "MISSED", total_ratio);
    return 0;
}
