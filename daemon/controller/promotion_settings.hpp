// The promotion settings in the ledger, by key: the operator's pin and freeze, and the last
// promotion (what the serving step rolls back to). Read by the promotion and serving steps and by
// the API's views.
#pragma once

#include <chrono>
#include <ctime>
#include <string>

namespace anvil::daemon {

inline constexpr const char* kPinKey = "promotion.pin";
inline constexpr const char* kFreezeKey = "promotion.freeze";
inline constexpr const char* kLastPromotionKey = "promotion.last";

inline std::chrono::system_clock::time_point parse_utc(const std::string& iso) {
    std::tm tm{};
    if (!strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return {};
    return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace anvil::daemon
