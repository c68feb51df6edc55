// anvild's own counters for GET /metrics (Prometheus text exposition): reconcile passes and their
// duration, API requests by route and status code, engine restarts. Recipes by status are read
// from the ledger when scraped.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace anvil::daemon {

class DaemonMetrics {
public:
    void record_pass(double seconds);
    void record_request(const std::string& route, int status);
    void record_engine_restart();
    // `extra` is appended: gauges the caller reads at scrape time.
    std::string render(const std::string& extra) const;

private:
    static constexpr std::array<double, 10> kBuckets{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};
    mutable std::mutex mutex_;
    std::uint64_t passes_ = 0;
    double pass_seconds_sum_ = 0;
    std::array<std::uint64_t, kBuckets.size()> pass_buckets_{};
    std::map<std::pair<std::string, int>, std::uint64_t> requests_;
    std::uint64_t engine_restarts_ = 0;
};

}  // namespace anvil::daemon
