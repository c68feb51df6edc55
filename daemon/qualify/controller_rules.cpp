#include "daemon/qualify/controller_rules.hpp"

#include <algorithm>

namespace anvil::qualify {

std::chrono::milliseconds Backoff::after(int failures) const {
    if (failures <= 0) return std::chrono::milliseconds(0);
    // 2^16 of any first wait is past every cap anvild is configured with; the shift stays defined.
    const auto doubled = first * (std::int64_t{1} << std::min(failures - 1, 16));
    return std::min(cap, doubled);
}

bool rollback_due(std::optional<std::chrono::system_clock::duration> since_promoted, int start_failures) {
    return since_promoted && *since_promoted < kProbation && start_failures >= kRollbackAfterFailures;
}

bool ExclusiveWindow::contains(int minute_of_day) const {
    return from_minute <= to_minute ? (minute_of_day >= from_minute && minute_of_day < to_minute)
                                    : (minute_of_day >= from_minute || minute_of_day < to_minute);
}

std::string ExclusiveWindow::str() const {
    auto clock = [](int minute) {
        const int h = minute / 60, m = minute % 60;
        return std::string{char('0' + h / 10), char('0' + h % 10), ':', char('0' + m / 10), char('0' + m % 10)};
    };
    return clock(from_minute) + "-" + clock(to_minute);
}

std::optional<ExclusiveWindow> parse_exclusive_window(std::string_view text) {
    auto clock = [&](std::size_t at) -> std::optional<int> {
        auto digit = [&](std::size_t i) { return text[at + i] >= '0' && text[at + i] <= '9'; };
        if (!(digit(0) && digit(1) && text[at + 2] == ':' && digit(3) && digit(4))) return std::nullopt;
        const int hours = (text[at] - '0') * 10 + (text[at + 1] - '0');
        const int minutes = (text[at + 3] - '0') * 10 + (text[at + 4] - '0');
        if (hours >= 24 || minutes >= 60) return std::nullopt;
        return hours * 60 + minutes;
    };
    if (text.size() != 11 || text[5] != '-') return std::nullopt;
    const auto from = clock(0), to = clock(6);
    if (!from || !to || *from == *to) return std::nullopt;
    return ExclusiveWindow{*from, *to};
}

}  // namespace anvil::qualify
