// anvild's side of systemd's notify protocol (Type=notify): readiness, status lines, watchdog
// pings and the stop/reload announcements. A thin wrapper over libsystemd's sd_notify, the reference
// implementation of the protocol; every call is a no-op when the process was not started by systemd
// (no $NOTIFY_SOCKET), so anvild behaves the same from a terminal.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace anvil::daemon {

// READY=1: the store is open and the first reconcile pass ran; systemd starts dependent units.
void notify_ready();
// STATUS=<text>: the one line `systemctl status anvild` shows.
void notify_status(std::string_view text);
// WATCHDOG=1: the reconcile loop is alive. Send at least every watchdog_interval() / 2.
void notify_watchdog();
// STOPPING=1: SIGTERM received; finishing the pass.
void notify_stopping();
// RELOADING=1: SIGHUP received; send notify_ready() again once the configuration is applied.
void notify_reloading();
// WatchdogSec= as systemd passed it ($WATCHDOG_USEC for this pid); nullopt when not under a watchdog.
std::optional<std::chrono::microseconds> watchdog_interval();

}  // namespace anvil::daemon
