// Feasibility speed: 10,000 generated candidates under seed 004's requirements, evaluated and
// serialized to recipe-feasibility-result/v1 JSON on one core (target: under 50 ms). The baseline,
// measured in the same run, is nlohmann's dump of the input document those candidates came from:
// the cost of merely writing the input back out.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "registry/feasibility.hpp"
#include "registry/feasibility_input.hpp"
#include "registry/feasibility_json.hpp"
#include "feasibility_campaign.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kTargetMs = 50.0;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// This thread's own time on a core: what "on one core" means even while other work shares the machine.
double cpu_ms() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

struct Timing {
    double wall_ms = 1e300;
    double cpu_ms = 1e300;
};

// The best of `runs`, in wall and in CPU time.
template <typename F>
Timing best_of(int runs, F f) {
    Timing best;
    for (int i = 0; i < runs; ++i) {
        const auto start = Clock::now();
        const double cpu_start = cpu_ms();
        f();
        best.cpu_ms = std::min(best.cpu_ms, cpu_ms() - cpu_start);
        best.wall_ms = std::min(best.wall_ms, ms_since(start));
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    const int count = argc > 1 ? std::stoi(argv[1]) : 10000;
    const int runs = 7;
    const json doc = anvil::bench::generate_campaign(json::parse(anvil::test::seed_text("004_")), count);
    FieldErrors errors;
    JsonReader reader(errors);
    const auto parse_start = Clock::now();
    const auto input = parse_feasibility_input(Node{&doc, ""}, reader);
    const double parse_ms = ms_since(parse_start);
    if (!input) {
        std::fprintf(stderr, "generated document is invalid: %s\n", errors.front().describe().c_str());
        return 1;
    }

    FeasibilityResult result;
    std::string out;
    const Timing evaluate = best_of(runs, [&] { result = evaluate_feasibility(*input); });
    // A fresh string each time pays for growing and first-touching ~40 MB; a daemon re-running on
    // new evidence keeps its buffer, which is the figure held to the target.
    const Timing serialize_cold = best_of(runs, [&] { out = feasibility_json(result); });
    const Timing serialize = best_of(runs, [&] {
        out.clear();
        append_feasibility_json(out, result);
    });
    const Timing total = best_of(runs, [&] {
        result = evaluate_feasibility(*input);
        out.clear();
        append_feasibility_json(out, result);
    });
    std::string baseline_out;
    const Timing baseline = best_of(runs, [&] { baseline_out = doc.dump(); });

    // The output must be the whole, valid document, not something cheaper.
    const json check = json::parse(out);
    if (check["candidates"].size() != static_cast<std::size_t>(count)) {
        std::fprintf(stderr, "serialized %zu candidates, expected %d\n", check["candidates"].size(), count);
        return 1;
    }
    std::map<std::string, int> classes;
    for (const auto& c : result.candidates) ++classes[std::string(to_string(c.verdict))];

    std::printf("feasibility of %d generated candidates under seed 004's requirements (best of %d; one thread)\n", count, runs);
    std::printf("                        cpu ms   wall ms\n");
    std::printf("  evaluate            %8.2f  %8.2f\n", evaluate.cpu_ms, evaluate.wall_ms);
    std::printf("  serialize           %8.2f  %8.2f   %.1f MB of JSON, %zu ledger variables\n", serialize.cpu_ms, serialize.wall_ms,
                out.size() / 1e6, check["ledger"].size());
    std::printf("  serialize, fresh    %8.2f  %8.2f   into a new string each time (growth and first-touch faults)\n",
                serialize_cold.cpu_ms, serialize_cold.wall_ms);
    std::printf("  evaluate+serialize  %8.2f  %8.2f   target < %.0f ms cpu: %s (%.2f of the target)\n", total.cpu_ms, total.wall_ms,
                kTargetMs, total.cpu_ms < kTargetMs ? "met" : "MISSED", total.cpu_ms / kTargetMs);
    std::printf("  baseline            %8.2f  %8.2f   nlohmann dump of the input document (%.1f MB); evaluate+serialize is %.2fx of it\n",
                baseline.cpu_ms, baseline.wall_ms, baseline_out.size() / 1e6, total.cpu_ms / baseline.cpu_ms);
    std::printf("  (parsing the generated input document once took %.1f ms)\n", parse_ms);
    std::printf("  classes:");
    for (const auto& [name, n] : classes) std::printf(" %s %d;", name.c_str(), n);
    std::printf("\n");
    return 0;
}
