// The systemd files as systemd itself reads them (systemd-analyze verify, systemd-sysusers and
// systemd-tmpfiles under --root), and anvild's notify calls received on a real notify socket.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "daemon/config/config.hpp"
#include "daemon/anvild/systemd_notify.hpp"
#include "test_support.hpp"

using anvil::test::read_file;
using anvil::test::run;
using anvil::test::TempDir;
using anvil::test::write_file;
namespace fs = std::filesystem;

namespace {

bool on_path(const std::string& tool) { return run({"sh", "-c", "command -v " + tool}).exit_code == 0; }

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) text.replace(at, from.size(), to);
    return text;
}

// The binary a test copy of the unit starts: the built anvild once it exists.
std::string built_anvild() {
#ifdef ANVILD
    return ANVILD;
#else
    WARN("anvild is not built yet: verifying the unit with the anvil CLI binary standing in for ExecStart");
    return ANVIL_CLI;
#endif
}

// A datagram socket where systemd would listen, given to sd_notify through $NOTIFY_SOCKET.
class NotifySocket {
public:
    explicit NotifySocket(const fs::path& path) {
        fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
        REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
        timeval timeout{2, 0};
        setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        setenv("NOTIFY_SOCKET", path.c_str(), 1);
    }
    ~NotifySocket() {
        unsetenv("NOTIFY_SOCKET");
        close(fd_);
    }
    std::string receive() {
        char buffer[4096];
        const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
        return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string();
    }

private:
    int fd_ = -1;
};

}  // namespace

TEST_CASE("the generated anvild.service passes systemd-analyze verify", "[systemd]") {
    if (!on_path("systemd-analyze")) {
        WARN("systemd-analyze is not installed (Debian package systemd): skipping unit verification");
        return;
    }
    const std::string unit = read_file(fs::path(ANVIL_SYSTEMD_BUILD_DIR) / "anvild.service");
    const std::string exec = std::string("ExecStart=") + ANVIL_INSTALLED_ANVILD + " --config " + anvil::daemon::kDefaultConfigFile;
    CHECK_THAT(unit, Catch::Contains(exec + "\n"));
    CHECK(unit.find("@ANVIL_") == std::string::npos);  // every template variable was substituted
    for (const char* line : {"Type=notify", "NotifyAccess=main", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
                             "WatchdogSec=60", "KillMode=process", "User=anvil", "Group=anvil", "StateDirectory=anvil",
                             "ConfigurationDirectory=anvil", "NoNewPrivileges=yes", "ProtectSystem=strict",
                             "ProtectHome=yes", "PrivateTmp=yes", "PrivateUsers=yes", "DevicePolicy=closed", "ProtectControlGroups=yes",
                             "UMask=0077", "WantedBy=multi-user.target"})
        CHECK_THAT(unit, Catch::Contains(std::string("\n") + line + "\n"));

    // verify insists that ExecStart exists, so the copy under test starts the binary this build made.
    TempDir tmp;
    write_file(tmp / "anvild.service", replace_all(unit, ANVIL_INSTALLED_ANVILD, built_anvild()));
    const auto verified = run({"systemd-analyze", "verify", (tmp / "anvild.service").string()});
    INFO(verified.output);
    CHECK(verified.exit_code == 0);
    // verify only warns about unknown keys and bad values, and still exits 0: any output is a failure.
    CHECK(verified.output.empty());

    // The check has teeth: a misspelt key is reported.
    write_file(tmp / "typo.service", replace_all(unit, "ProtectHome=yes", "ProtectHomes=yes"));
    write_file(tmp / "typo.service", replace_all(read_file(tmp / "typo.service"), ANVIL_INSTALLED_ANVILD, built_anvild()));
    CHECK_THAT(run({"systemd-analyze", "verify", (tmp / "typo.service").string()}).output, Catch::Contains("ProtectHomes"));
}

TEST_CASE("systemd-analyze security rates the generated anvild.service at most 3.5", "[systemd]") {
    if (!on_path("systemd-analyze")) {
        WARN("systemd-analyze is not installed (Debian package systemd): skipping");
        return;
    }
    const auto rated = run({"systemd-analyze", "security", "--offline=yes", "--no-pager", (fs::path(ANVIL_SYSTEMD_BUILD_DIR) / "anvild.service").string()});
    INFO(rated.output);
    const auto at = rated.output.find("Overall exposure level for anvild.service: ");
    REQUIRE(at != std::string::npos);
    const double exposure = std::stod(rated.output.substr(at + std::string_view("Overall exposure level for anvild.service: ").size()));
    CHECK(exposure <= 3.5);
    // tests/systemd/run.sh rates the unit as installed, under a running systemd, and checks that
    // anvild still does its work with every directive in force.
}

TEST_CASE("sysusers.d creates the anvil user and tmpfiles.d its directories and first configuration", "[systemd]") {
    if (!on_path("systemd-sysusers") || !on_path("systemd-tmpfiles")) {
        WARN("systemd-sysusers or systemd-tmpfiles is not installed (Debian package systemd): skipping");
        return;
    }
    TempDir root;
    fs::create_directories(root / "etc");
    const auto users = run({"systemd-sysusers", "--root=" + root.path().string(),
                            (fs::path(ANVIL_SYSTEMD_SOURCE_DIR) / "anvil.sysusers.conf").string()});
    INFO(users.output);
    REQUIRE(users.exit_code == 0);
    CHECK_THAT(read_file(root / "etc/passwd"), Catch::Contains("anvil:x:") && Catch::Contains(":/var/lib/anvil:"));
    CHECK_THAT(read_file(root / "etc/group"), Catch::Contains("anvil:x:"));

    // systemd 252's tmpfiles resolves users on the host, not under --root, and this host has no
    // anvil user: the copy under test names the user running the test instead.
    std::string me = run({"id", "-un"}).output;
    me = me.substr(0, me.find('\n'));
    const std::string entries = read_file(fs::path(ANVIL_SYSTEMD_BUILD_DIR) / "anvil.tmpfiles.conf");
    CHECK_THAT(entries, Catch::Contains(std::string("-   ") + ANVIL_INSTALLED_DEFAULT_CONFIG + "\n"));
    write_file(root / "tmpfiles.conf", replace_all(entries, " anvil anvil ", " " + me + " " + me + " "));
    // The default configuration where `make install` puts it, for the C (copy) line.
    const fs::path installed_default = root.path() / fs::path(ANVIL_INSTALLED_DEFAULT_CONFIG).relative_path();
    fs::create_directories(installed_default.parent_path());
    fs::copy_file(fs::path(ANVIL_SYSTEMD_SOURCE_DIR) / "anvild.json", installed_default);
    const auto created = run({"systemd-tmpfiles", "--root=" + root.path().string(), "--create", (root / "tmpfiles.conf").string()});
    INFO(created.output);
    CHECK(created.exit_code == 0);
    CHECK(created.output.empty());
    for (const char* dir : {"var/lib/anvil", "var/lib/anvil/models", "var/cache/anvil"}) {
        CHECK(fs::is_directory(root / dir));
        CHECK((fs::status(root / dir).permissions() & fs::perms::all) == fs::perms(0750));
    }
    REQUIRE(fs::exists(root / "etc/anvil/anvild.json"));
    CHECK(read_file(root / "etc/anvil/anvild.json") == read_file(fs::path(ANVIL_SYSTEMD_SOURCE_DIR) / "anvild.json"));

    // An operator's edited configuration is never overwritten.
    write_file(root / "etc/anvil/anvild.json", "{\"sources\": []}");
    CHECK(run({"systemd-tmpfiles", "--root=" + root.path().string(), "--create", (root / "tmpfiles.conf").string()}).exit_code == 0);
    CHECK(read_file(root / "etc/anvil/anvild.json") == "{\"sources\": []}");
}

TEST_CASE("notify calls reach $NOTIFY_SOCKET and do nothing without it", "[systemd]") {
    TempDir tmp;
    {
        NotifySocket systemd(tmp / "notify");
        anvil::daemon::notify_ready();
        CHECK(systemd.receive() == "READY=1");
        anvil::daemon::notify_status("reconciling\n3 recipes");
        CHECK(systemd.receive() == "STATUS=reconciling 3 recipes");
        anvil::daemon::notify_watchdog();
        CHECK(systemd.receive() == "WATCHDOG=1");
        anvil::daemon::notify_reloading();
        CHECK(systemd.receive() == "RELOADING=1");
        anvil::daemon::notify_stopping();
        CHECK(systemd.receive() == "STOPPING=1");
    }
    // Outside systemd: no socket, no error, no watchdog.
    anvil::daemon::notify_ready();
    anvil::daemon::notify_watchdog();
    CHECK_FALSE(anvil::daemon::watchdog_interval());
}

TEST_CASE("watchdog_interval reads WatchdogSec for this process only", "[systemd]") {
    setenv("WATCHDOG_USEC", "60000000", 1);
    setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
    const auto mine = anvil::daemon::watchdog_interval();
    // An engine started by anvild inherits the variables but is not the watched process.
    setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
    const auto inherited = anvil::daemon::watchdog_interval();
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    REQUIRE(mine);
    CHECK(*mine == std::chrono::seconds(60));
    CHECK_FALSE(inherited);
    CHECK_FALSE(anvil::daemon::watchdog_interval());
}
