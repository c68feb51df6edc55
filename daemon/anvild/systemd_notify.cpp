// sd_notify(3) calls for anvild; see systemd_notify.hpp.
#include "daemon/anvild/systemd_notify.hpp"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

namespace anvil::daemon {

namespace {

// unset_environment = 0: $NOTIFY_SOCKET stays, since anvild notifies for its whole life, not once.
void send(const std::string& state) {
    const int rc = sd_notify(0, state.c_str());
    if (rc < 0) spdlog::warn("systemd notification '{}' failed: {}", state, std::strerror(-rc));
}

}  // namespace

void notify_ready() { send("READY=1"); }

void notify_status(std::string_view text) {
    std::string line(text);
    // One line: a newline would start a new assignment in the protocol's datagram.
    for (char& c : line)
        if (c == '\n' || c == '\r') c = ' ';
    send("STATUS=" + line);
}

void notify_watchdog() { send("WATCHDOG=1"); }

void notify_stopping() { send("STOPPING=1"); }

void notify_reloading() { send("RELOADING=1"); }

std::optional<std::chrono::microseconds> watchdog_interval() {
    uint64_t usec = 0;
    // unset_environment = 0 for the same reason as send(). sd_watchdog_enabled also checks
    // $WATCHDOG_PID, so an engine that inherited the variables does not think it is watched.
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
    return std::chrono::microseconds(static_cast<std::int64_t>(usec));
}

}  // namespace anvil::daemon
