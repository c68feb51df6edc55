// anvild's configuration: the bundled example and the systemd default load, every problem is
// reported at once with its JSON pointer, relative paths follow the file, and the API token file
// is created private and refused when it is not.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

#include "daemon/config/config.hpp"
#include "test_support.hpp"

using anvil::daemon::ConfigError;
using anvil::daemon::DaemonConfig;
using anvil::daemon::load_config;
using anvil::daemon::parse_config;
using anvil::test::TempDir;
using anvil::test::write_file;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<std::string> problems_of(const std::string& text, const fs::path& file = "/etc/anvil/anvild.json") {
    try {
        parse_config(text, file);
    } catch (const ConfigError& e) {
        return e.problems.empty() ? std::vector<std::string>{e.what()} : e.problems;
    }
    return {};
}

const fs::path kRepository = fs::path(ANVIL_EXAMPLES_DIR).parent_path();

}  // namespace

TEST_CASE("examples/anvild.json loads and points at the bundled example registry", "[config]") {
    const DaemonConfig c = load_config(fs::path(ANVIL_EXAMPLES_DIR) / "anvild.json");
    REQUIRE(c.sources.size() == 1);
    CHECK(c.sources[0].name == "examples");
    CHECK(c.sources[0].url == (kRepository / ".anvil/example-registry").lexically_normal().string());
    CHECK(c.sources[0].ref == "main");
    CHECK(c.data_dir == (kRepository / ".anvil/data").lexically_normal());
    CHECK(c.model_root == (kRepository / ".anvil/models").lexically_normal());
    // CPU only: no declared GPUs ("auto" finds none without nvidia-smi).
    CHECK((c.inventory_mode == "none" || c.inventory_mode == "auto"));
    CHECK_FALSE(c.inventory);
    CHECK(c.listen.str() == "127.0.0.1:7700");
    CHECK(c.serve.str() == "127.0.0.1:7701");
    CHECK(c.promotion.policy == anvil::qualify::Policy::automatic);
    CHECK(c.promotion.min_interval == std::chrono::seconds(0));
    CHECK(c.promotion.attempts == 3);
    CHECK(c.reconcile_interval == std::chrono::seconds(2));
    CHECK(anvil::daemon::token_path(c) == c.data_dir / "api-token");

    REQUIRE(c.requirements);
    std::map<std::string, double> tokens;
    for (const auto& [name, v] : c.requirements->tokens) tokens[name] = anvil::registry::to_double(*v.value);
    CHECK(tokens == std::map<std::string, double>{{"prompt", 1536}, {"output_reserve", 512}});
    CHECK(anvil::registry::to_double(*c.requirements->concurrency.value) == 2);
    CHECK(anvil::registry::to_double(*c.requirements->physical_vram_bytes.value) == 0);
    CHECK(c.requirements->physical_vram_bytes.status == anvil::registry::EvidenceStatus::measured);
    CHECK(c.requirements->vram_reserves.empty());
    CHECK(c.requirements_json.contains("thresholds"));

    // Thresholds are seed 004's, name for name and value for value.
    const json seed = json::parse(anvil::test::seed_text("004_"));
    std::map<std::string, double> expected, actual;
    for (const auto& [name, v] : seed["requirements"]["thresholds"].items()) expected[name] = v["value"].get<double>();
    for (const auto& [name, v] : c.requirements->thresholds) actual[name] = anvil::registry::to_double(*v.value);
    CHECK(actual == expected);
}

TEST_CASE("seed 004's requirements are a valid requirements section", "[config]") {
    const json seed = json::parse(anvil::test::seed_text("004_"));
    const json config = {{"requirements", seed["requirements"]}};
    const DaemonConfig c = parse_config(config.dump(), "/etc/anvil/anvild.json");
    REQUIRE(c.requirements);
    CHECK(c.requirements->tokens.size() == 2);
    CHECK(c.requirements->vram_reserves.size() == 2);
    CHECK(c.requirements->thresholds.size() == 4);
    CHECK(anvil::registry::to_double(*c.requirements->physical_vram_bytes.value) == 205283917824.0);
    CHECK(c.requirements_json == seed["requirements"]);
}

TEST_CASE("the default configuration for /etc/anvil loads", "[config]") {
    const DaemonConfig c = load_config(kRepository / "systemd/anvild.json");
    CHECK(c.sources.empty());
    CHECK(c.data_dir == "/var/lib/anvil");
    CHECK(c.inventory_mode == "auto");
    CHECK(c.requirements);
    CHECK(c.listen.str() == "127.0.0.1:7700");
}

TEST_CASE("an empty object is the documented defaults", "[config]") {
    const DaemonConfig c = parse_config("{}", "/etc/anvil/anvild.json");
    const DaemonConfig defaults;
    CHECK(c.config_file == "/etc/anvil/anvild.json");
    CHECK(c.sources.empty());
    CHECK(c.data_dir == defaults.data_dir);
    CHECK_FALSE(c.requirements);
    CHECK(c.inventory_mode == "auto");
    CHECK_FALSE(c.commercial);
    CHECK(c.listen.str() == "127.0.0.1:7700");
    CHECK(c.serve.str() == "127.0.0.1:7701");
    CHECK(c.port_first == 20000);
    CHECK(c.port_last == 20999);
    CHECK(c.promotion.policy == anvil::qualify::Policy::automatic);
    CHECK(c.promotion.needle_depths == std::vector<double>{0.25, 0.5, 0.75});
    CHECK_FALSE(c.promotion.exclusive_window);
    CHECK(c.reconcile_interval == std::chrono::seconds(10));
    CHECK(c.engine_ready_timeout == std::chrono::seconds(600));
    CHECK(c.container_runtime == "podman");
    CHECK(c.container_api_socket.empty());  // the CLI
    CHECK_FALSE(c.stop_engines_on_exit);
    CHECK(anvil::daemon::token_path(c) == "/var/lib/anvil/api-token");
}

TEST_CASE("every key is read into its member", "[config]") {
    const std::string text = R"({
      "sources": [{"name": "main", "url": "https://example.invalid/reg.git", "ref": "v2", "poll_interval_seconds": 0.5},
                  {"url": "git@example.invalid:team/reg.git"},
                  {"url": "file:///srv/registry"}],
      "data_dir": "/srv/anvil",
      "inventory": {"gpus": [{"uuid": "GPU-1", "name": "Test GPU", "memory_mib": 1024, "idle_used_mib": 1}]},
      "commercial": true,
      "model_root": "/models", "cache_root": "/cache", "allowed_mount_roots": ["/opt/assets", "assets"],
      "container_runtime": "docker", "container_runtime_arguments": ["--log-level", "warn"],
      "engine_binary": "/usr/bin/anvil-engine",
      "listen": "[::1]:8700", "serve": "0.0.0.0:8701", "served_model_alias": "house-model",
      "engine_ports": {"first": 30000, "last": 30010},
      "token_file": "/run/secrets/anvil-token",
      "promotion": {"policy": "manual", "min_interval_seconds": 60, "margin": 0.05, "attempts": 5,
                    "needle_depths": [0.1, 0.9], "exclusive_window": "23:30-05:00", "drain_timeout_seconds": 10,
                    "retry_backoff_min_seconds": 1, "retry_backoff_max_seconds": 8, "warm_e2e_min_seconds": 0.5},
      "reconcile_interval_seconds": 0.25, "engine_ready_timeout_seconds": 30, "stop_engines_on_exit": true
    })";
    const DaemonConfig c = parse_config(text, "/etc/anvil/anvild.json");
    REQUIRE(c.sources.size() == 3);
    CHECK(c.sources[0].name == "main");
    CHECK(c.sources[0].url == "https://example.invalid/reg.git");
    CHECK(c.sources[0].ref == "v2");
    CHECK(c.sources[0].poll_interval == std::chrono::milliseconds(500));
    CHECK(c.sources[1].url == "git@example.invalid:team/reg.git");  // scp-style URL: not a path
    CHECK(c.sources[1].name == c.sources[1].url);
    CHECK(c.sources[1].poll_interval == std::chrono::seconds(60));
    CHECK(c.sources[2].url == "file:///srv/registry");
    CHECK(c.data_dir == "/srv/anvil");
    CHECK(c.inventory_mode == "declared");
    REQUIRE(c.inventory);
    REQUIRE(c.inventory->gpus.size() == 1);
    CHECK(c.inventory->gpus[0].uuid == "GPU-1");
    CHECK(c.commercial == true);
    CHECK(c.allowed_mount_roots == std::vector<fs::path>{"/opt/assets", "/etc/anvil/assets"});
    CHECK(c.container_runtime == "docker");
    CHECK(c.container_runtime_arguments == std::vector<std::string>{"--log-level", "warn"});
    CHECK(c.engine_binary == "/usr/bin/anvil-engine");
    CHECK(c.listen.host == "::1");
    CHECK(c.listen.port == 8700);
    CHECK(c.listen.str() == "[::1]:8700");
    CHECK(c.serve.str() == "0.0.0.0:8701");
    CHECK(c.served_model_alias == "house-model");
    CHECK(c.port_first == 30000);
    CHECK(c.port_last == 30010);
    CHECK(anvil::daemon::token_path(c) == "/run/secrets/anvil-token");
    CHECK(c.promotion.policy == anvil::qualify::Policy::manual);
    CHECK(c.promotion.min_interval == std::chrono::seconds(60));
    CHECK(c.promotion.margin == Approx(0.05));
    CHECK(c.promotion.attempts == 5);
    CHECK(c.promotion.needle_depths == std::vector<double>{0.1, 0.9});
    REQUIRE(c.promotion.exclusive_window);
    CHECK(c.promotion.exclusive_window->str() == "23:30-05:00");
    CHECK(c.promotion.drain_timeout == std::chrono::seconds(10));
    CHECK(c.promotion.retry_backoff_min == std::chrono::seconds(1));
    CHECK(c.promotion.retry_backoff_max == std::chrono::seconds(8));
    CHECK(c.promotion.warm_e2e_min == std::chrono::milliseconds(500));
    CHECK(c.reconcile_interval == std::chrono::milliseconds(250));
    CHECK(c.engine_ready_timeout == std::chrono::seconds(30));
    CHECK(c.stop_engines_on_exit);
}

TEST_CASE("every problem is reported at once, one line each, naming file and pointer", "[config]") {
    const auto problems = problems_of(R"({
      "promotion": {"policy": "sometimes", "exclusive_window": "25:00-01:00", "atempts": 2},
      "reconcile_interval_secs": 5,
      "listen": "localhost",
      "engine_ports": {"first": 9000, "last": 8000},
      "sources": [{"name": "a", "url": "/srv/a"}, {"name": "a", "url": "/srv/b", "poll_interval_seconds": -1}],
      "inventory": "sometimes",
      "requirements": {"tokens": {}, "concurrency": {"value": 1, "unit": "sequences", "status": "assumed", "source": "x"}}
    })");
    const std::set<std::string> got(problems.begin(), problems.end());
    INFO(anvil::daemon::ConfigError(problems).what());
    const std::string f = "/etc/anvil/anvild.json: ";
    CHECK(got.count(f + "/promotion/policy: expected \"auto\" or \"manual\", found \"sometimes\""));
    CHECK(got.count(f + "/promotion/exclusive_window: expected a local-time window \"HH:MM-HH:MM\" (e.g. \"02:00-05:00\"), or null, found \"25:00-01:00\""));
    auto has = [&](const std::string& prefix, const std::string& part) {
        return std::any_of(got.begin(), got.end(), [&](const std::string& line) {
            return line.starts_with(f + prefix) && line.find(part) != std::string::npos;
        });
    };
    CHECK(has("/promotion/atempts: expected one of policy, ", "found the unknown key \"atempts\" (did you mean \"attempts\"?)"));
    CHECK(has("/reconcile_interval_secs: ", "(did you mean \"reconcile_interval_seconds\"?)"));
    CHECK(has("/listen: expected \"HOST:PORT\"", "found \"localhost\""));
    CHECK(has("/engine_ports/last: expected a port at or above first (9000)", "found 8000"));
    CHECK(has("/sources/1/name: expected a source name not used before (/sources/0 has it)", "\"a\""));
    CHECK(has("/sources/1/poll_interval_seconds: expected a number of seconds above 0", "found -1"));
    CHECK(has("/inventory: expected \"auto\", \"none\" or an inventory object", "\"sometimes\""));
    CHECK(has("/requirements/physical_vram_bytes: ", "found nothing"));
    CHECK(problems.size() == 10);
    for (const auto& line : problems) CHECK(line.find('\n') == std::string::npos);
}

TEST_CASE("unknown keys are errors at every level", "[config]") {
    CHECK(problems_of(R"({"sources": [{"url": "/x", "branch": "main"}]})").size() == 1);
    CHECK(problems_of(R"({"engine_ports": {"first": 1, "last": 2, "step": 1}})").size() == 1);
    CHECK(problems_of(R"({"inventory": {"gpus": [], "gpu_count": 2}})").size() == 1);
    const json seed = json::parse(anvil::test::seed_text("004_"));
    json requirements = seed["requirements"];
    requirements["concurency"] = requirements["concurrency"];
    const auto problems = problems_of(json{{"requirements", requirements}}.dump());
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Catch::Contains("/requirements/concurency") && Catch::Contains("did you mean \"concurrency\""));
}

TEST_CASE("relative paths resolve against the configuration file's directory, not the working directory", "[config]") {
    TempDir tmp;
    write_file(tmp / "conf/anvild.json", R"({"data_dir": "state", "model_root": "../models", "token_file": "secret/token",
        "engine_binary": "bin/anvil-engine", "sources": [{"url": "registry"}]})");
    const DaemonConfig c = load_config(tmp / "conf/anvild.json");
    CHECK(c.config_file == tmp / "conf/anvild.json");
    CHECK(c.data_dir == tmp / "conf/state");
    CHECK(c.model_root == tmp / "models");
    CHECK(c.engine_binary == tmp / "conf/bin/anvil-engine");
    CHECK(anvil::daemon::token_path(c) == tmp / "conf/secret/token");
    REQUIRE(c.sources.size() == 1);
    CHECK(c.sources[0].url == (tmp / "conf/registry").string());
    CHECK(c.sources[0].name == "registry");  // the URL as written
}

TEST_CASE("a file that is not JSON, or not there, is one clear line", "[config]") {
    TempDir tmp;
    write_file(tmp / "broken.json", "{\"listen\": ");
    try {
        load_config(tmp / "broken.json");
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK_THAT(e.what(), Catch::StartsWith((tmp / "broken.json").string() + ": not valid JSON: "));
    }
    CHECK_THROWS_WITH(load_config(tmp / "absent.json"),
                      Catch::StartsWith((tmp / "absent.json").string() + ": cannot read the configuration: No such file"));
    CHECK(problems_of("[1, 2]") == std::vector<std::string>{"/etc/anvil/anvild.json: /: expected a JSON object, found an array of 2"});
}

TEST_CASE("HOST:PORT parsing", "[config]") {
    using anvil::daemon::parse_host_port;
    CHECK(parse_host_port("127.0.0.1:7700", "--listen").str() == "127.0.0.1:7700");
    CHECK(parse_host_port("localhost:0", "--listen").port == 0);
    CHECK(parse_host_port("[::1]:7700", "--listen").host == "::1");
    for (const char* bad : {"", "7700", ":7700", "host:", "host:65536", "host:77a", "::1:7700", "[::1]7700", "[::1]:"})
        CHECK_THROWS_WITH(parse_host_port(bad, "--listen"), Catch::StartsWith("--listen: expected \"HOST:PORT\""));
}

TEST_CASE("command-line overrides replace the file's data_dir and addresses", "[config]") {
    DaemonConfig c = parse_config(R"({"data_dir": "/srv/a", "listen": "127.0.0.1:1"})", "/etc/anvil/anvild.json");
    anvil::daemon::ConfigOverrides o;
    o.data_dir = "/tmp/isolated";
    o.listen = anvil::daemon::parse_host_port("127.0.0.1:9999", "--listen");
    anvil::daemon::apply_overrides(c, o);
    CHECK(c.data_dir == "/tmp/isolated");
    CHECK(c.listen.port == 9999);
    CHECK(c.serve.port == 7701);
    CHECK(anvil::daemon::token_path(c) == "/tmp/isolated/api-token");
}

TEST_CASE("allowed_hosts and allowed_origins: names and origins as browsers send them", "[config][origin]") {
    const auto c = parse_config(R"({"allowed_hosts": ["gpu-box.lan"], "allowed_origins": ["http://app.local:3000", "*"]})", "/etc/anvil/anvild.json");
    CHECK(c.allowed_hosts == std::vector<std::string>{"gpu-box.lan"});
    CHECK(c.allowed_origins == std::vector<std::string>{"http://app.local:3000", "*"});
    CHECK(parse_config("{}", "/etc/anvil/anvild.json").allowed_origins.empty());
    CHECK_THROWS_WITH(parse_config(R"({"allowed_hosts": ["box:7701"]})", "/etc/anvil/anvild.json"),
                      Catch::Contains("/allowed_hosts/0: expected a host name without port or scheme"));
    CHECK_THROWS_WITH(parse_config(R"({"allowed_origins": ["app.local"]})", "/etc/anvil/anvild.json"),
                      Catch::Contains("/allowed_origins/0: expected an origin as browsers send it"));
    CHECK_THROWS_WITH(parse_config(R"({"allowed_origins": ["http://app.local/path"]})", "/etc/anvil/anvild.json"),
                      Catch::Contains("/allowed_origins/0"));
}

TEST_CASE("ensure_token creates a private random token once and replaces one others could read", "[config]") {
    TempDir tmp;
    const fs::path file = tmp / "data/api-token";  // the directory does not exist yet
    const std::string token = anvil::daemon::ensure_token(file);
    CHECK(token.size() == 64);
    CHECK(token.find_first_not_of("0123456789abcdef") == std::string::npos);
    struct stat st {};
    REQUIRE(stat(file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(anvil::daemon::ensure_token(file) == token);  // read back, not replaced
    CHECK(anvil::daemon::ensure_token(tmp / "other-token") != token);
    CHECK(std::distance(fs::directory_iterator(tmp / "data"), fs::directory_iterator()) == 1);  // no temporary left

    // Found readable by others, it may have leaked: a new token replaces it, in a private file.
    for (const auto mode : {fs::perms(0644), fs::perms(0640), fs::perms(0604)}) {
        const std::string before = anvil::daemon::ensure_token(file);
        fs::permissions(file, mode);
        const std::string rotated = anvil::daemon::ensure_token(file);
        CHECK(rotated != before);
        CHECK(rotated.size() == 64);
        REQUIRE(stat(file.c_str(), &st) == 0);
        CHECK((st.st_mode & 0777) == 0600);
        CHECK(anvil::daemon::ensure_token(file) == rotated);
        CHECK(std::distance(fs::directory_iterator(tmp / "data"), fs::directory_iterator()) == 1);
    }

    // An operator's own token is kept as written (without its newline).
    write_file(tmp / "mine", "my-own-token\n");
    fs::permissions(tmp / "mine", fs::perms(0600));
    CHECK(anvil::daemon::ensure_token(tmp / "mine") == "my-own-token");

    write_file(tmp / "empty", "");
    fs::permissions(tmp / "empty", fs::perms(0600));
    CHECK_THROWS_WITH(anvil::daemon::ensure_token(tmp / "empty"), Catch::Contains("holds no usable token"));

    fs::create_symlink(file, tmp / "link");
    CHECK_THROWS_WITH(anvil::daemon::ensure_token(tmp / "link"), Catch::Contains("symbolic link"));
}

TEST_CASE("container_api_socket chooses the Engine API backend: an absolute socket path, unix:// allowed", "[config]") {
    CHECK(parse_config(R"({"container_api_socket": "/run/podman/podman.sock"})", "/etc/anvil/anvild.json").container_api_socket ==
          "/run/podman/podman.sock");
    CHECK(parse_config(R"({"container_api_socket": "unix:///var/run/docker.sock"})", "/etc/anvil/anvild.json").container_api_socket ==
          "/var/run/docker.sock");
    CHECK(parse_config(R"({"container_api_socket": null})", "/etc/anvil/anvild.json").container_api_socket.empty());
    const std::string f = "/etc/anvil/anvild.json: ";
    for (const char* bad : {R"("podman.sock")", R"("")", R"("tcp://127.0.0.1:2375")", "true"}) {
        const auto problems = problems_of(std::string(R"({"container_api_socket": )") + bad + "}");
        INFO(bad);
        REQUIRE(problems.size() == 1);
        CHECK_THAT(problems[0], Catch::StartsWith(f + "/container_api_socket: expected the absolute path of the container Engine API's unix socket") &&
                                    Catch::EndsWith(std::string("found ") + bad));
    }
    const auto both = problems_of(R"({"container_api_socket": "/run/podman/podman.sock", "container_runtime_arguments": ["--log-level", "warn"]})");
    REQUIRE(both.size() == 1);
    CHECK_THAT(both[0], Catch::StartsWith(f + "/container_runtime_arguments: expected no command-line arguments when container_api_socket is set"));
}
