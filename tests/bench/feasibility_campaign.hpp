// A generated feasibility campaign: seed 004's four candidates as templates, copied `count` times
// with their figures varied so every verdict path is taken. bench_feasibility evaluates it in
// process; bench_feasibility_cli writes it to a file and runs the anvil binary over it.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "registry/json_reader.hpp"

namespace anvil::bench {

inline registry::json evidence(std::int64_t min, std::int64_t max, const char* unit, const char* status) {
    registry::json v{{"unit", unit}, {"status", status}, {"source", "generated for the feasibility benchmark"}, {"observed_at", "2026-08-29"}};
    if (min == max) v["value"] = min;
    else v["min"] = min, v["max"] = max;
    return v;
}

inline registry::json ratio(double value, const char* status) {
    return {{"value", value}, {"unit", "ratio"}, {"status", status}, {"source", "generated local measurement"}, {"observed_at", "2026-08-29"}};
}

// `seed` is seed 004's document; the result has its requirements and `count` candidates.
inline registry::json generate_campaign(const registry::json& seed, int count) {
    using registry::json;
    json doc = seed;
    const json templates = seed["candidates"];
    json& candidates = doc["candidates"] = json::array();
    std::mt19937_64 rng(4);
    std::uniform_real_distribution<double> scale(0.7, 1.3);
    std::uniform_int_distribution<int> pick(0, 9);
    const std::int64_t limits[] = {98304, 262144, 1048576};
    for (int i = 0; i < count; ++i) {
        json c = templates[i % templates.size()];
        c["id"] = c["id"].get<std::string>() + "-" + std::to_string(i);
        c["runtime_context_limit_tokens"]["value"] = limits[pick(rng) % 3];
        if (i % 4 == 0 || i % 4 == 1) {
            const auto resident = static_cast<std::int64_t>(158e9 * scale(rng));
            c["resident_components"] = {{"target_draft_runtime_and_graph_proxy",
                                         evidence(resident, resident + 7000000000, "bytes", "estimated")}};
            const auto kv = static_cast<std::int64_t>(12000 * scale(rng));
            c["per_token_components"] = {{"request_cache_proxy", evidence(kv, kv + 1000, "bytes/token", "estimated")}};
            c["per_sequence_components"] = {{"scheduler_state", evidence(1 << 20, 1 << 20, "bytes", "measured")}};
        }
        if (pick(rng) < 3) {  // a measured run: behaviour axes decide
            c["metrics"] = {{"deterministic_pass_rate", ratio(pick(rng) < 8 ? 1.0 : 0.95, "measured")},
                            {"quality_score", ratio(80.0 + pick(rng), "measured")},
                            {"reference_quality_score", ratio(84.0, "measured")},
                            {"warm_e2e_seconds", ratio(5.0 + pick(rng), "measured")},
                            {"no_spec_warm_e2e_seconds", ratio(10.0, "measured")},
                            {"successful_tasks_per_hour", ratio(9.0 + pick(rng), "measured")},
                            {"reference_tasks_per_hour", ratio(10.0, "measured")}};
        }
        candidates.push_back(std::move(c));
    }
    return doc;
}

}  // namespace anvil::bench
