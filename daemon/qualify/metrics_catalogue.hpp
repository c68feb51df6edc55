// Every metric qualification records or the promotion policy reads, once: its name as the ledger
// and the API spell it, its unit, and which way is better. Measurement, the promotion policy and the views name metrics
// through this table, never by a string of their own.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace anvil::qualify {

enum class Better { lower, higher, neither };
std::string_view to_string(Better b);  // "lower" | "higher" | "neither"

struct Metric {
    std::string_view name;
    std::string_view unit;
    Better better;
};

namespace metric {
inline constexpr Metric ttft{"ttft_seconds", "seconds", Better::lower};
inline constexpr Metric prefill_rate{"prefill_tokens_per_second", "tokens/s", Better::higher};
inline constexpr Metric decode_rate_c1{"decode_tokens_per_second_c1", "tokens/s", Better::higher};
inline constexpr Metric decode_rate_cn{"decode_tokens_per_second_cN", "tokens/s", Better::higher};
inline constexpr Metric warm_e2e{"warm_e2e_seconds", "seconds", Better::lower};
inline constexpr Metric tasks_per_hour{"tasks_per_hour", "tasks/h", Better::higher};
inline constexpr Metric peak_memory{"peak_memory_bytes", "bytes", Better::lower};
inline constexpr Metric gpu_memory{"gpu_memory_bytes", "bytes", Better::lower};
inline constexpr Metric relative_quality_loss{"relative_quality_loss", "ratio", Better::lower};
inline constexpr Metric mean_kl{"mean_kl", "nats", Better::lower};
inline constexpr Metric top1_agreement{"top1_agreement", "ratio", Better::higher};
inline constexpr Metric draft_proposed{"draft_proposed_tokens", "tokens", Better::neither};
inline constexpr Metric draft_accepted{"draft_accepted_tokens", "tokens", Better::neither};
inline constexpr Metric draft_acceptance_ratio{"draft_acceptance_ratio", "ratio", Better::higher};
inline constexpr Metric draft_mean_accepted{"draft_mean_accepted_tokens", "tokens", Better::higher};
// The share of deterministic tasks passed, as a registry's evidence states it.
inline constexpr Metric deterministic_pass_rate{"deterministic_pass_rate", "ratio", Better::higher};
// One per hard gate: "gate_pass_rate:<gate>", the share of its attempts that passed.
inline constexpr Metric gate_pass_rate{"gate_pass_rate:", "ratio", Better::higher};
}  // namespace metric

inline constexpr std::array kMetrics{metric::ttft,           metric::prefill_rate,        metric::decode_rate_c1,
                                     metric::decode_rate_cn, metric::warm_e2e,            metric::tasks_per_hour,
                                     metric::peak_memory,    metric::gpu_memory,          metric::relative_quality_loss,
                                     metric::mean_kl,        metric::top1_agreement,      metric::draft_proposed,
                                     metric::draft_accepted, metric::draft_acceptance_ratio, metric::draft_mean_accepted,
                                     metric::deterministic_pass_rate, metric::gate_pass_rate};

// The catalogue's entry for a recorded name ("gate_pass_rate:json" is gate_pass_rate's), or nothing.
std::optional<Metric> find_metric(std::string_view name);
// "gate_pass_rate:<gate>"
std::string gate_pass_rate_metric(std::string_view gate);

}  // namespace anvil::qualify
