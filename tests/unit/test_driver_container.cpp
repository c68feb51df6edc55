// The container driver with a real podman: an image built in the test (a rootfs holding this build's
// anvil-engine and its libraries, `podman import`), pinned by its digest, run, probed, adopted and
// stopped. Skips with a message only where no container runtime can start a container.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <sstream>

#include "engine/driver/command_runner.hpp"
#include "engine/driver/container_driver.hpp"
#include "engine/driver/process_spawn.hpp"
#include "engine/driver/readiness.hpp"
#include "test_support.hpp"

using namespace anvil::driver;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

// podman as this kind of machine runs it: runc, cgroupfs, no default ulimits.
ContainerDriverOptions podman_options(const anvil::test::TempDir& dir, const std::string& owner) {
    anvil::test::write_file(dir / "containers.conf",
                            "[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = \"cgroupfs\"\nruntime = \"runc\"\n");
    ContainerDriverOptions o;
    o.runtime = "podman";
    o.global_arguments = {"--runtime", "runc", "--cgroup-manager", "cgroupfs"};
    o.runtime_env = {{"CONTAINERS_CONF", (dir / "containers.conf").string()}};
    o.owner = owner;
    o.state_dir = dir / "state";
    return o;
}

std::vector<std::string> podman(const ContainerDriverOptions& o, std::vector<std::string> args) {
    std::vector<std::string> argv = {o.runtime};
    argv.insert(argv.end(), o.global_arguments.begin(), o.global_arguments.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
}

CommandResult run_podman(const ContainerDriverOptions& o, std::vector<std::string> args) {
    std::map<std::string, std::string> env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
    if (const char* home = std::getenv("HOME")) env["HOME"] = home;
    for (const auto& [k, v] : o.runtime_env) env[k] = v;
    return run_command(podman(o, std::move(args)), env);
}

// Builds the image and returns its pinned reference, or "" with `why` when podman cannot run here.
std::string build_engine_image(const anvil::test::TempDir& dir, const ContainerDriverOptions& o, const std::string& name,
                               std::string& why) {
    if (!find_executable("podman", std::getenv("PATH") ? std::getenv("PATH") : "")) {
        why = "podman is not installed";
        return "";
    }
    const fs::path root = dir / "rootfs";
    fs::create_directories(root / "bin");
    fs::copy_file(ANVIL_ENGINE, root / "bin/anvil-engine");
    const auto ldd = anvil::test::run({"ldd", ANVIL_ENGINE});
    std::istringstream lines(ldd.output);
    std::string word;
    while (lines >> word) {
        if (!word.starts_with("/") || !fs::exists(word)) continue;
        fs::create_directories((root / word.substr(1)).parent_path());
        fs::copy_file(fs::canonical(word), root / word.substr(1), fs::copy_options::overwrite_existing);
    }
    if (anvil::test::run({"tar", "-C", root.string(), "-cf", (dir / "rootfs.tar").string(), "."}).exit_code != 0) {
        why = "tar failed";
        return "";
    }
    const auto imported = run_podman(o, {"import", (dir / "rootfs.tar").string(), name + ":test"});
    if (!imported.ok()) {
        why = "podman import failed: " + imported.err;
        return "";
    }
    const auto digest = run_podman(o, {"image", "inspect", "--format", "{{.Digest}}", name + ":test"});
    const std::string pinned = name + "@" + trimmed(digest.out);
    const auto probe = run_podman(o, {"run", "--rm", "--network=host", pinned, "/bin/anvil-engine", "--help"});
    if (!probe.ok()) {
        why = "podman cannot start a container here: " + probe.err;
        run_podman(o, {"rmi", "--force", name + ":test"});
        return "";
    }
    return pinned;
}

}  // namespace

TEST_CASE("the container driver runs a digest-pinned image, adopts it by label, and stops and removes it", "[driver][container]") {
    anvil::test::TempDir dir;
    std::mt19937_64 rng{std::random_device{}()};
    const std::string tag = std::to_string(rng() % 1000000000);
    const auto options = podman_options(dir, "anvil-test-" + tag);
    std::string why;
    const std::string name = "localhost/anvil-driver-test-" + tag;
    const std::string image = build_engine_image(dir, options, name, why);
    if (image.empty()) {
        WARN("skipping the container driver test: " << why);
        return;
    }
    REQUIRE(anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "models/tiny").string(), "--preset", "tiny"}).exit_code == 0);

    anvil::registry::Recipe r;
    r.id = "tiny-container";
    r.launch.kind = "docker";
    r.launch.image = name + ":test";
    r.launch.mounts = {{"${MODEL_ROOT}", "/models", true, {}}};
    r.launch.arguments = {"/bin/anvil-engine", "serve", "--model", "/models/tiny", "--served-model-name", "tiny-c", "--host",
                          "127.0.0.1", "--port", "${PORT}", "--max-context", "64", "--max-seqs", "1", "--threads", "1"};
    r.launch.environment = {{"ANVIL_LOG", "info"}};
    r.launch.shm_size = "64m";
    r.serving.served_model_name = "tiny-c";
    LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    config.allowed_roots = {dir / "models"};
    config.port_first = 23800;
    config.port_last = 23899;

    ContainerDriver driver(options);
    CHECK_THROWS_WITH(driver.start({r.id, "rev"}, resolve_launch(r, config)), Catch::Contains("not pinned by digest"));

    r.launch.image = image;
    const auto launch = resolve_launch(r, config);
    EngineHandle sample;
    sample.engine_id = "e1";
    sample.recipe = {r.id, "rev"};
    const auto args = container_run_arguments(options, sample, launch);
    CHECK(std::find(args.begin(), args.end(), "anvil.engine=e1") != args.end());
    CHECK(std::find(args.begin(), args.end(), (fs::canonical(dir / "models")).string() + ":/models:ro") != args.end());

    const auto e = driver.start({r.id, "rev"}, launch);
    wait_ready(driver, e, 60s);
    CHECK(driver.probe(e).healthy);
    CHECK(driver.logs(e, 20).find("listening on http://127.0.0.1:" + std::to_string(launch.port)) != std::string::npos);

    // A second driver (a restarted supervisor) finds the same container by its labels.
    ContainerDriver again(options);
    const auto adopted = again.adopt();
    REQUIRE(adopted.size() == 1);
    CHECK(adopted[0].container_id == e.container_id);
    CHECK(adopted[0].engine_id == e.engine_id);
    CHECK(adopted[0].port == launch.port);

    again.stop(adopted[0], 5s);
    CHECK(again.inspect(e.container_id).is_null());  // removed
    CHECK(anvil::test::read_file(e.log_path).find("listening on") != std::string::npos);  // its logs kept
    CHECK(again.adopt().empty());
    run_podman(options, {"rmi", "--force", name + ":test"});
}
