#include "daemon/qualify/metrics_catalogue.hpp"

namespace anvil::qualify {

std::string_view to_string(Better b) {
    switch (b) {
        case Better::lower: return "lower";
        case Better::higher: return "higher";
        case Better::neither: return "neither";
    }
    return "?";
}

std::optional<Metric> find_metric(std::string_view name) {
    for (const Metric& m : kMetrics) {
        const bool family = m.name.ends_with(':');
        if (family ? name.starts_with(m.name) && name.size() > m.name.size() : name == m.name) return m;
    }
    return std::nullopt;
}

std::string gate_pass_rate_metric(std::string_view gate) { return std::string(metric::gate_pass_rate.name) + std::string(gate); }

}  // namespace anvil::qualify
