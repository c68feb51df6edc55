#include "daemon/controller/daemon_metrics.hpp"

#include <sstream>

namespace anvil::daemon {

void DaemonMetrics::record_pass(double seconds) {
    std::lock_guard lock(mutex_);
    ++passes_;
    pass_seconds_sum_ += seconds;
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
        if (seconds <= kBuckets[i]) ++pass_buckets_[i];
}

void DaemonMetrics::record_request(const std::string& route, int status) {
    std::lock_guard lock(mutex_);
    ++requests_[{route, status}];
}

void DaemonMetrics::record_engine_restart() {
    std::lock_guard lock(mutex_);
    ++engine_restarts_;
}

std::string DaemonMetrics::render(const std::string& extra) const {
    std::lock_guard lock(mutex_);
    std::ostringstream out;
    out << "# HELP anvil_reconcile_passes_total Reconcile passes run.\n# TYPE anvil_reconcile_passes_total counter\n"
        << "anvil_reconcile_passes_total " << passes_ << "\n";
    out << "# HELP anvil_reconcile_pass_seconds Duration of reconcile passes.\n# TYPE anvil_reconcile_pass_seconds histogram\n";
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
        out << "anvil_reconcile_pass_seconds_bucket{le=\"" << kBuckets[i] << "\"} " << pass_buckets_[i] << "\n";
    out << "anvil_reconcile_pass_seconds_bucket{le=\"+Inf\"} " << passes_ << "\n"
        << "anvil_reconcile_pass_seconds_sum " << pass_seconds_sum_ << "\n"
        << "anvil_reconcile_pass_seconds_count " << passes_ << "\n";
    out << "# HELP anvil_engine_restarts_total Engines started again after exiting or failing.\n"
        << "# TYPE anvil_engine_restarts_total counter\nanvil_engine_restarts_total " << engine_restarts_ << "\n";
    out << "# HELP anvil_api_requests_total REST API requests by route and status code.\n# TYPE anvil_api_requests_total counter\n";
    for (const auto& [key, n] : requests_)
        out << "anvil_api_requests_total{route=\"" << key.first << "\",code=\"" << key.second << "\"} " << n << "\n";
    out << extra;
    return out.str();
}

}  // namespace anvil::daemon
