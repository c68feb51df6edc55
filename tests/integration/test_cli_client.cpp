// The anvil CLI's daemon commands, run as a user would: what it says and its exit status when
// anvild is not there or the command is wrong, and against a real anvild on loopback (a child
// process reading a real git registry) when this build has one.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

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

#ifdef ANVILD
TEST_CASE("anvil against a real anvild: reads, filters, paging, writes with and without the token", "[cli]") {
    TempDir tmp;
    anvil::test::GitRepo registry(tmp / "registry");
    registry.write("recipes/tp4.json", anvil::test::seed_text("002_"));
    registry.write("recipes/tp2.json", anvil::test::seed_text("003_"));
    registry.commit("two recipes");
    const json config = {{"sources", {{{"name", "test"}, {"url", registry.dir().string()}, {"ref", "main"}, {"poll_interval_seconds", 0.2}}}},
                         {"data_dir", (tmp / "data").string()},
                         {"model_root", (tmp / "models").string()},
                         {"inventory", "auto"},
                         {"reconcile_interval_seconds", 0.2}};
    anvil::test::write_file(tmp / "anvild.json", config.dump(2));
    const std::string api = "127.0.0.1:" + std::to_string(unused_port());
    const std::string serve = "127.0.0.1:" + std::to_string(unused_port());
    anvil::test::ChildProcess daemon({ANVILD, "--config", (tmp / "anvild.json").string(), "--listen", api, "--serve", serve});

    // Ready once both recipes are in the ledger.
    json listed;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
        auto r = anvil_cli({"recipes", "--api", api, "--json"}, tmp.path());
        if (r.exit_code == 0 && (listed = json::parse(r.output))["meta"]["total"] == 2) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    REQUIRE(listed["meta"]["total"] == 2);
    const std::string tp4 = "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4";
    const std::string tp2 = "glm53-flash-exl3-tr3-4bpw-dflash2-rtxpro6000-vllm-tp2";

    auto table = anvil_cli({"recipes", "--api", api}, tmp.path());
    INFO(table.output);
    CHECK(table.exit_code == 0);
    CHECK_THAT(table.output, Catch::StartsWith("ID ") && Catch::Contains(tp4) && Catch::Contains(tp2) &&
                                 Catch::Contains("recipes 1-2 of 2"));

    auto page = anvil_cli({"recipes", "--api", api, "--limit", "1"}, tmp.path());
    CHECK(page.exit_code == 0);
    CHECK_THAT(page.output, Catch::Contains("recipes 1-1 of 2") &&
                                Catch::Contains("next page: anvil recipes --api " + api + " --limit 1 --offset 1"));
    auto second = anvil_cli({"recipes", "--api", api, "--limit", "1", "--offset", "1", "--json"}, tmp.path());
    CHECK(json::parse(second.output)["links"]["next"].is_null());

    // Filters reach the API: a text query and a status that no recipe has.
    auto by_text = json::parse(anvil_cli({"recipes", "--api", api, "--q", "sglang", "--json"}, tmp.path()).output);
    REQUIRE(by_text["data"].size() == 1);
    CHECK(by_text["data"][0]["id"] == tp4);
    CHECK(anvil_cli({"recipes", "--api", api, "--status", "promoted"}, tmp.path()).output == "no recipes match (0 in all)\n");
    auto bad_filter = anvil_cli({"recipes", "--api", api, "--status", "shiny"}, tmp.path());
    CHECK(bad_filter.exit_code == 1);
    CHECK_THAT(bad_filter.output, Catch::StartsWith("anvil: status must be one of") && Catch::EndsWith("(400 bad_request)\n"));

    auto recipe = anvil_cli({"recipe", tp2, "--api", api}, tmp.path());
    CHECK(recipe.exit_code == 0);
    CHECK_THAT(recipe.output, Catch::StartsWith(tp2 + "  ") && Catch::Contains("revisions:") && Catch::Contains(registry.head().substr(0, 12)));
    auto history = anvil_cli({"history", tp2, "--api", api}, tmp.path());
    CHECK(history.exit_code == 0);
    CHECK_THAT(history.output, Catch::StartsWith("WHEN ") && Catch::Contains("candidate"));
    auto missing = anvil_cli({"recipe", "no-such-recipe", "--api", api}, tmp.path());
    CHECK(missing.exit_code == 1);
    CHECK_THAT(missing.output, Catch::Contains("(404 not_found)"));

    CHECK(anvil_cli({"default", "--api", api}, tmp.path()).output == "default: none\n");
    CHECK(anvil_cli({"engines", "--api", api}, tmp.path()).output == "no engines\n");
    auto status = anvil_cli({"status", "--api", api}, tmp.path());
    CHECK(status.exit_code == 0);
    CHECK_THAT(status.output, Catch::StartsWith("default     none\n") && Catch::Contains("endpoint    " + serve));

    // Writes: refused with a wrong token (exit 1), done with the daemon's.
    anvil::test::write_file(tmp / "wrong-token", "0123\n");
    auto refused = anvil_cli({"sync", "--api", api, "--token-file", (tmp / "wrong-token").string()}, tmp.path());
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.output, Catch::Contains("(401 unauthorized)") && Catch::Contains("wrong-token"));
    const std::vector<std::string> token{"--api", api, "--token-file", (tmp / "data/api-token").string()};
    auto with = [&](std::vector<std::string> words) {
        words.insert(words.end(), token.begin(), token.end());
        return anvil_cli(words, tmp.path());
    };
    auto sync = with({"sync"});
    CHECK(sync.exit_code == 0);
    CHECK(sync.output == "registry sync queued\n");
    auto freeze = with({"freeze", "--reason", "maintenance window"});
    CHECK(freeze.exit_code == 0);
    CHECK_THAT(anvil_cli({"status", "--api", api}, tmp.path()).output, Catch::Contains("frozen yes (maintenance window)"));
    CHECK(with({"unfreeze"}).exit_code == 0);
    CHECK_THAT(anvil_cli({"status", "--api", api}, tmp.path()).output, Catch::Contains("frozen no"));
    // Neither recipe can be validated on this machine, so neither can be pinned.
    auto pin = with({"pin", tp2});
    CHECK(pin.exit_code == 1);
    CHECK_THAT(pin.output, Catch::StartsWith("anvil: "));
    auto unpin = with({"unpin"});
    CHECK(unpin.exit_code == 1);
    CHECK_THAT(unpin.output, Catch::Contains("(409 conflict)"));
    auto raw = with({"qualify", "no-such-recipe", "--json"});
    CHECK(raw.exit_code == 1);
    CHECK(json::parse(raw.output.substr(0, raw.output.find('\n')))["error"]["code"] == "not_found");

    daemon.kill(SIGTERM);
    CHECK(daemon.wait() == 0);
}
#endif
