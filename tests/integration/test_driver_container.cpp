// The container driver with a real podman: an image built in the test (a rootfs holding this build's
// anvil-engine and its libraries, `podman import`), pinned by its digest, run, probed, adopted and
// stopped — through podman's CLI, through the Engine API of `podman system service`, and through the
// docker CLI pointed at that service. Skips with a message only where podman cannot start a container
// (or, for the docker CLI, where docker is not installed).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon/drivers/command_runner.hpp"
#include "daemon/drivers/container_backend.hpp"
#include "daemon/drivers/container_driver.hpp"
#include "daemon/drivers/process_spawn.hpp"
#include "daemon/drivers/readiness.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using anvil::test::trimmed;

namespace {

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
    const fs::path tar = anvil::test::engine_rootfs_tar(dir.path(), ANVIL_ENGINE, why);
    if (tar.empty()) return "";
    const auto imported = run_podman(o, {"import", tar.string(), name + ":test"});
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

// `podman system service` on a socket in `dir`, with the same configuration as the CLI, for as long
// as the object lives.
class PodmanService {
public:
    PodmanService(const anvil::test::TempDir& dir, const ContainerDriverOptions& o) : socket_(dir / "podman.sock") {
        std::vector<std::string> argv = {"env"};
        for (const auto& [k, v] : o.runtime_env) argv.push_back(k + "=" + v);
        for (const auto& a : podman(o, {"system", "service", "--time=0", "unix://" + socket_.string()})) argv.push_back(a);
        child_.emplace(argv);
        for (int i = 0; i < 200 && !fs::exists(socket_); ++i) std::this_thread::sleep_for(50ms);
    }
    ~PodmanService() {
        if (!child_) return;
        child_->kill(SIGTERM);
        child_->wait();
    }
    bool up() const { return fs::exists(socket_); }
    const fs::path& socket() const { return socket_; }

private:
    fs::path socket_;
    std::optional<anvil::test::ChildProcess> child_;
};

anvil::registry::Recipe tiny_container_recipe(const std::string& image) {
    anvil::registry::Recipe r;
    r.id = "tiny-container";
    r.launch.kind = "docker";
    r.launch.image = image;
    r.launch.mounts = {{"${MODEL_ROOT}", "/models", true, {}}};
    r.launch.arguments = {"/bin/anvil-engine", "serve", "--model", "/models/tiny", "--served-model-name", "tiny-c", "--host",
                          "127.0.0.1", "--port", "${PORT}", "--max-context", "64", "--max-seqs", "1", "--threads", "1"};
    r.launch.environment = {{"ANVIL_LOG", "info"}};
    r.launch.shm_size = "64m";
    r.serving.served_model_name = "tiny-c";
    return r;
}

// The promise every backend keeps: an unpinned image is refused; the pinned one runs, becomes ready
// and healthy; a fresh driver (a restarted supervisor) adopts it by its labels — and so does one on
// `other_backend` when given, since labels are shared; it stops within the grace and is removed
// with its logs kept.
void run_scenario(const anvil::test::TempDir& dir, const ContainerDriverOptions& options, const std::string& tagged,
                  const std::string& pinned, int port_first, const ContainerDriverOptions& podman_cli,
                  const ContainerDriverOptions* other_backend = nullptr) {
    if (!fs::exists(dir / "models/tiny"))
        REQUIRE(anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "models/tiny").string(), "--preset", "tiny"}).exit_code == 0);
    auto r = tiny_container_recipe(tagged);
    LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    config.allowed_roots = {dir / "models"};
    config.port_first = port_first;
    config.port_last = port_first + 99;

    ContainerDriver driver(options);
    CHECK_THROWS_WITH(driver.start({r.id, "rev"}, resolve_launch(r, config)), Catch::Contains("not pinned by digest"));

    r.launch.image = pinned;
    const auto launch = resolve_launch(r, config);
    const auto e = driver.start({r.id, "rev"}, launch);
    wait_ready(driver, e, 60s);
    CHECK(driver.probe(e).healthy);
    CHECK(driver.logs(e, 20).find("listening on http://127.0.0.1:" + std::to_string(launch.port)) != std::string::npos);

    // What runs is exactly what was resolved, whichever backend created it (podman's own inspect).
    const auto inspected = nlohmann::json::parse(run_podman(podman_cli, {"container", "inspect", e.container_id}).out, nullptr, false);
    REQUIRE(inspected.is_array());
    REQUIRE(inspected.size() == 1);
    const auto& c = inspected[0];
    CHECK(c["Config"]["Cmd"] == nlohmann::json(launch.arguments));
    const auto env = c["Config"]["Env"].get<std::vector<std::string>>();
    CHECK(std::find(env.begin(), env.end(), "ANVIL_LOG=info") != env.end());
    CHECK(c["Config"]["Labels"]["anvil.engine"] == e.engine_id);
    CHECK(c["Config"]["Labels"]["anvil.owner"] == options.owner);
    CHECK(c["HostConfig"]["NetworkMode"] == "host");
    CHECK(c["HostConfig"]["ShmSize"] == 64 << 20);
    bool model_mount = false;
    for (const auto& m : c["Mounts"])
        if (m["Destination"] == "/models") model_mount = m["RW"] == false && m["Source"] == fs::canonical(dir / "models").string();
    CHECK(model_mount);

    if (other_backend) {
        const auto seen = ContainerDriver(*other_backend).adopt();
        REQUIRE(seen.size() == 1);
        CHECK(seen[0].container_id == e.container_id);
    }
    ContainerDriver again(options);
    const auto adopted = again.adopt();
    REQUIRE(adopted.size() == 1);
    CHECK(adopted[0].container_id == e.container_id);
    CHECK(adopted[0].engine_id == e.engine_id);
    CHECK(adopted[0].port == launch.port);
    CHECK(adopted[0].served_model_name == "tiny-c");

    const auto before = std::chrono::steady_clock::now();
    again.stop(adopted[0], 5s);
    CHECK(std::chrono::steady_clock::now() - before < 5s + 10s);  // the grace, plus removal
    CHECK_FALSE(again.inspect(e.container_id).has_value());  // removed
    CHECK(anvil::test::read_file(e.log_path).find("listening on") != std::string::npos);  // its logs kept
    CHECK(again.logs(e, 5).find("listening on") != std::string::npos);  // from the saved log once it is gone
    CHECK(again.adopt().empty());
}

// The test's image, built with podman's CLI (owner anvil-test-<tag>); on destruction the image and
// any container of that owner are removed, also when a check failed half-way.
struct PodmanImage {
    explicit PodmanImage(const anvil::test::TempDir& dir) {
        std::mt19937_64 rng{std::random_device{}()};
        const std::string tag = std::to_string(rng() % 1000000000);
        options = podman_options(dir, "anvil-test-" + tag);
        name = "localhost/anvil-driver-test-" + tag;
        pinned = build_engine_image(dir, options, name, why_not);
    }
    ~PodmanImage() {
        if (pinned.empty()) return;
        const auto left = run_podman(options, {"ps", "--all", "--quiet", "--filter", "label=anvil.owner=" + options.owner});
        std::istringstream ids(left.out);
        for (std::string id; ids >> id;) run_podman(options, {"rm", "--force", id});
        run_podman(options, {"rmi", "--force", name + ":test"});
    }
    PodmanImage(const PodmanImage&) = delete;
    PodmanImage& operator=(const PodmanImage&) = delete;

    std::string name;
    ContainerDriverOptions options;  // podman's CLI
    std::string pinned;              // "" with why_not when podman cannot run containers here
    std::string why_not;
};

// The pinned test image with a podman system service beside it; `why_not` says why a test must skip.
struct ServedImage {
    explicit ServedImage(const anvil::test::TempDir& dir) : image(dir) {
        if (image.pinned.empty()) {
            why_not = image.why_not;
            return;
        }
        service.emplace(dir, image.options);
        if (!service->up()) why_not = "podman system service did not create " + service->socket().string();
    }
    PodmanImage image;
    std::optional<PodmanService> service;
    std::string why_not;
};

}  // namespace

TEST_CASE("the container driver runs a digest-pinned image, adopts it by label, and stops and removes it", "[driver][container]") {
    anvil::test::TempDir dir;
    const PodmanImage image(dir);
    if (image.pinned.empty()) {
        WARN("skipping the container driver test: " << image.why_not);
        return;
    }
    EngineHandle sample;
    sample.engine_id = "e1";
    sample.recipe = {"tiny-container", "rev"};
    LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    config.allowed_roots = {dir / "models"};
    fs::create_directories(dir / "models");
    const auto args = container_run_arguments(image.options, sample, resolve_launch(tiny_container_recipe(image.pinned), config));
    CHECK(std::find(args.begin(), args.end(), "anvil.engine=e1") != args.end());
    CHECK(std::find(args.begin(), args.end(), (fs::canonical(dir / "models")).string() + ":/models:ro") != args.end());

    run_scenario(dir, image.options, image.name + ":test", image.pinned, 23800, image.options);
}

TEST_CASE("the container driver runs, adopts and stops a pinned image through the Engine API socket", "[driver][container][container-api]") {
    anvil::test::TempDir dir;
    const ServedImage served(dir);
    if (!served.why_not.empty()) {
        WARN("skipping the Engine API test: " << served.why_not);
        return;
    }
    const PodmanImage& image = served.image;
    auto api = image.options;
    api.api_socket = served.service->socket();
    run_scenario(dir, api, image.name + ":test", image.pinned, 23900, image.options, &image.options);

    // A socket nobody serves: one line naming it and what to check.
    auto missing = api;
    missing.api_socket = dir / "nobody.sock";
    CHECK_THROWS_WITH(ContainerDriver(missing).adopt(),
                      Catch::Contains("container API at unix socket " + missing.api_socket.string()) && Catch::Contains("podman system service"));
    // The API's own message, e.g. for an image that is not there.
    auto r = tiny_container_recipe("localhost/anvil-no-such-image@sha256:" + std::string(64, 'a'));
    LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    config.allowed_roots = {dir / "models"};
    config.port_first = 23950;
    config.port_last = 23999;
    CHECK_THROWS_WITH(ContainerDriver(api).start({r.id, "rev"}, resolve_launch(r, config)),
                      Catch::Contains("POST /containers/create: HTTP 404"));
}

TEST_CASE("the container driver runs, adopts and stops a pinned image with the docker CLI", "[driver][container][docker]") {
    if (!find_executable("docker", std::getenv("PATH") ? std::getenv("PATH") : "")) {
        WARN("skipping the docker CLI test: docker is not installed");
        return;
    }
    anvil::test::TempDir dir;
    const ServedImage served(dir);
    if (!served.why_not.empty()) {
        WARN("skipping the docker CLI test: " << served.why_not);
        return;
    }
    const PodmanImage& image = served.image;
    const fs::path& socket = served.service->socket();
    // The docker CLI has no dockerd here: it talks to podman's service, as it would to dockerd.
    ContainerDriverOptions docker = image.options;
    docker.runtime = "docker";
    docker.global_arguments = {};
    docker.runtime_env = {{"DOCKER_HOST", "unix://" + socket.string()}, {"DOCKER_CONFIG", (dir / "docker-config").string()}};
    run_scenario(dir, docker, image.name + ":test", image.pinned, 24000, image.options, &image.options);
}

TEST_CASE("GPUs chosen by UUID become CDI devices numbered from 0 inside the container, for both backends", "[driver]") {
    ContainerDriverOptions o;
    o.owner = "test";
    EngineHandle e;
    e.engine_id = "gpu-recipe-1";
    e.recipe = {"gpu-recipe", "abc"};
    e.host = "127.0.0.1";
    e.port = 8000;
    ResolvedLaunch l;
    l.image = "registry.example/vllm@sha256:" + std::string(64, 'a');
    l.arguments = {"--model", "/models/m"};
    l.gpu_uuids = {"GPU-aaaa", "GPU-bbbb"};
    l.ipc = "host";
    l.shm_size = "16g";

    // The Engine API backend sends exactly this spec.
    const ContainerSpec spec = container_spec(o, e, l);
    CHECK(spec.cdi_devices == std::vector<std::string>{"nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=GPU-bbbb"});
    CHECK(spec.environment.at("CUDA_VISIBLE_DEVICES") == "0,1");  // container-relative, not host indices
    CHECK(spec.ipc == std::optional<std::string>("host"));
    CHECK(parse_byte_size(*spec.shm_size) == std::optional<std::int64_t>(16ll << 30));

    // The CLI backend turns the same spec into flags.
    const auto argv = container_run_arguments(o, e, l);
    const auto has = [&](const std::string& a, const std::string& b) {
        for (size_t i = 0; i + 1 < argv.size(); ++i)
            if (argv[i] == a && argv[i + 1] == b) return true;
        return false;
    };
    CHECK(has("--device", "nvidia.com/gpu=GPU-aaaa"));
    CHECK(has("--device", "nvidia.com/gpu=GPU-bbbb"));
    CHECK(has("--env", "CUDA_VISIBLE_DEVICES=0,1"));
    CHECK(std::find(argv.begin(), argv.end(), "--ipc=host") != argv.end());
    CHECK(std::find(argv.begin(), argv.end(), "--shm-size=16g") != argv.end());
    // The image comes after every option, and the recipe's arguments after the image.
    const auto image = std::find(argv.begin(), argv.end(), *l.image);
    REQUIRE(image != argv.end());
    CHECK(std::vector<std::string>(image + 1, argv.end()) == l.arguments);
}

TEST_CASE("Engine API helpers: docker's size units, and logs demultiplexed from their frames", "[driver][container-api]") {
    CHECK(parse_byte_size("64m") == 64 << 20);
    CHECK(parse_byte_size("32g") == std::int64_t(32) << 30);
    CHECK(parse_byte_size("1.5GiB") == std::int64_t(3) << 29);
    CHECK(parse_byte_size("512kb") == 512 << 10);
    CHECK(parse_byte_size("1048576") == 1048576);
    CHECK_FALSE(parse_byte_size("lots"));
    CHECK_FALSE(parse_byte_size("12q"));
    CHECK_FALSE(parse_byte_size(""));

    auto frame = [](char stream, const std::string& text) {
        std::string h = {stream, 0, 0, 0, char(text.size() >> 24), char(text.size() >> 16), char(text.size() >> 8), char(text.size())};
        return h + text;
    };
    CHECK(demultiplex_stream(frame(1, "out line\n") + frame(2, "err line\n") + frame(1, "more\n")) == "out line\nerr line\nmore\n");
    CHECK(demultiplex_stream(frame(1, std::string(300, 'x'))) == std::string(300, 'x'));  // a size past one byte
    CHECK(demultiplex_stream("plain text from a TTY\n") == "plain text from a TTY\n");
    CHECK(demultiplex_stream("") == "");
}
