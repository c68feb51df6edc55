// The anvil CLI's daemon commands, run as a user would: what it says and its exit status when
// anvild is not there or the command is wrong.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

using anvil::test::run;
using anvil::test::TempDir;
using nlohmann::json;

namespace {

// A loopback port nothing listens on: bound once by the kernel's choice, then released.
int unused_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    close(fd);
    return ntohs(address.sin_port);
}

// Runs the CLI in `cwd` (so ./.anvil/data/api-token of the repository is never picked up).
anvil::test::ProcessResult anvil_cli(std::vector<std::string> args, const std::filesystem::path& cwd) {
    args.insert(args.begin(), ANVIL_CLI);
    return run(args, cwd);
}

}  // namespace

TEST_CASE("anvil without a daemon: one actionable line and exit 2", "[cli]") {
    TempDir tmp;
    const std::string api = "127.0.0.1:" + std::to_string(unused_port());

    auto down = anvil_cli({"status", "--api", api}, tmp.path());
    CHECK(down.exit_code == 2);
    CHECK(down.output == "anvil: cannot reach anvild at " + api + ": connection refused (is it running? --api HOST:PORT)\n");

    auto bad_api = anvil_cli({"recipes", "--api", "localhost"}, tmp.path());
    CHECK(bad_api.exit_code == 2);
    CHECK_THAT(bad_api.output, Catch::Contains("--api expects HOST:PORT (e.g. 127.0.0.1:7700), found 'localhost'"));

    // A write reads its token before it connects, and says where it looked.
    auto no_token = anvil_cli({"sync", "--api", api, "--token-file", (tmp / "absent").string()}, tmp.path());
    CHECK(no_token.exit_code == 2);
    CHECK(no_token.output == "anvil: cannot read the API token " + (tmp / "absent").string() +
                                 ": no such file or directory (writes need the api-token anvild creates in its data_dir; "
                                 "--token-file FILE or ANVIL_TOKEN_FILE)\n");

    for (const std::vector<std::string>& wrong : std::vector<std::vector<std::string>>{
             {"recipe"}, {"pin"}, {"status", "extra"}, {"recipes", "--pinned", "maybe"}, {"recipes", "--limit", "ten"},
             {"freeze", "--because", "x"}}) {
        auto usage = anvil_cli(wrong, tmp.path());
        INFO(usage.output);
        CHECK(usage.exit_code == 2);
        CHECK_THAT(usage.output, Catch::EndsWith("(see anvil --help)\n"));
    }
    auto help = anvil_cli({"--help"}, tmp.path());
    CHECK(help.exit_code == 0);
    for (const char* command : {"status", "recipes [--status S", "recipe ID", "history ID", "engines", "sync", "qualify ID",
                                "pin ID | unpin", "freeze [--reason R] | unfreeze"})
        CHECK_THAT(help.output, Catch::Contains(command));
}
