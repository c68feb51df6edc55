// Launch resolution: placeholders from configuration only, mounts inside allowed roots, free ports.
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "daemon/drivers/api_key.hpp"
#include "daemon/drivers/embedded_driver.hpp"
#include "daemon/drivers/launch_resolution.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
namespace fs = std::filesystem;

namespace {

anvil::registry::Recipe native_recipe() {
    anvil::registry::Recipe r;
    r.id = "native-demo";
    r.launch.kind = "native";
    r.launch.arguments = {"/usr/bin/llama-server", "-m", "${MODEL_ROOT}/m.gguf", "--port", "${PORT}", "--alias", "a b $HOME"};
    r.launch.environment = {{"ENGINE_SCRATCH", "${CACHE_ROOT}/hf"}, {"LITERAL", "$NOT_A_PLACEHOLDER"}};
    return r;
}

}  // namespace

TEST_CASE("placeholders expand from configuration and an unknown one is an error", "[driver]") {
    const std::map<std::string, std::string> values = {{"MODEL_ROOT", "/models"}, {"PORT", "9000"}};
    CHECK(expand_placeholders("${MODEL_ROOT}/x:${PORT}", values, "w") == "/models/x:9000");
    CHECK(expand_placeholders("$HOME and $$ stay", values, "w") == "$HOME and $$ stay");
    CHECK_THROWS_WITH(expand_placeholders("${CACHE_ROOT}/hf", values, "/launch/environment/HF_HOME"),
                      Catch::Contains("unknown placeholder ${CACHE_ROOT}") && Catch::Contains("/launch/environment/HF_HOME") &&
                          Catch::Contains("MODEL_ROOT"));
    CHECK_THROWS_AS(expand_placeholders("${MODEL_ROOT", values, "w"), LaunchError);
}

TEST_CASE("a resolved launch keeps the argv as written, with placeholders and the allocated port filled in", "[driver]") {
    anvil::test::TempDir dir;
    LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}, {"CACHE_ROOT", "/cache"}};
    config.allowed_roots = {dir.path()};
    config.port_first = 23100;
    config.port_last = 23199;
    const auto launch = resolve_launch(native_recipe(), config);
    REQUIRE(launch.port >= 23100);
    REQUIRE(launch.port <= 23199);
    CHECK(launch.arguments == std::vector<std::string>{"/usr/bin/llama-server", "-m", (dir / "models").string() + "/m.gguf", "--port",
                                                       std::to_string(launch.port), "--alias", "a b $HOME"});
    CHECK(launch.environment == std::map<std::string, std::string>{{"ENGINE_SCRATCH", "/cache/hf"}, {"LITERAL", "$NOT_A_PLACEHOLDER"}});

    auto r = native_recipe();
    r.launch.arguments.push_back("${GPU_MEMORY}");
    CHECK_THROWS_WITH(resolve_launch(r, config), Catch::Contains("/launch/arguments/7") && Catch::Contains("${GPU_MEMORY}"));
}

TEST_CASE("mount sources and model paths must resolve inside the allowed roots", "[driver]") {
    anvil::test::TempDir dir;
    fs::create_directories(dir / "root/models/m");
    fs::create_directories(dir / "outside/secret");
    fs::create_directory_symlink(dir / "outside", dir / "root/escape");
    const std::vector<fs::path> roots = {dir / "root"};

    CHECK(resolve_inside_roots(dir / "root/models/m", roots, "w") == fs::canonical(dir / "root/models/m"));
    CHECK(resolve_inside_roots(dir / "root/not-yet-there", roots, "w") == fs::canonical(dir / "root") / "not-yet-there");
    CHECK_THROWS_WITH(resolve_inside_roots(dir / "root/models/../models/m", roots, "w"), Catch::Contains("'..'"));
    CHECK_THROWS_WITH(resolve_inside_roots(dir / "root/escape/secret", roots, "/launch/mounts/0/source"),
                      Catch::Contains("outside the allowed roots") && Catch::Contains("/launch/mounts/0/source"));
    CHECK_THROWS_WITH(resolve_inside_roots(dir / "rootless", roots, "w"), Catch::Contains("outside the allowed roots"));
    CHECK_THROWS_WITH(resolve_inside_roots("relative/dir", roots, "w"), Catch::Contains("not an absolute path"));

    anvil::registry::Recipe r;
    r.id = "mounts";
    r.launch.kind = "docker";
    r.launch.mounts = {{"${MODEL_ROOT}/escape/secret", "/models", true, {}}};
    LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "root").string()}};
    config.allowed_roots = roots;
    config.port_first = 23200;
    config.port_last = 23299;
    CHECK_THROWS_WITH(resolve_launch(r, config), Catch::Contains("outside the allowed roots"));
    r.launch.mounts = {{"${MODEL_ROOT}/models/m", "/models", true, {}}};
    const auto launch = resolve_launch(r, config);
    REQUIRE(launch.mounts.size() == 1);
    CHECK(launch.mounts[0].source == fs::canonical(dir / "root/models/m"));
    CHECK(launch.mounts[0].target == "/models");
}

TEST_CASE("ports are allocated from the configured range and a port in use is skipped", "[driver]") {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(23300);
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd, 1) == 0);
    CHECK_FALSE(port_is_free("127.0.0.1", 23300));
    CHECK(allocate_port("127.0.0.1", 23300, 23310) == 23301);
    CHECK(allocate_port("127.0.0.1", 23300, 23310, {23301, 23302}) == 23303);
    CHECK_THROWS_WITH(allocate_port("127.0.0.1", 23300, 23300), Catch::Contains("no free port in 23300-23300"));
    ::close(fd);
}

TEST_CASE("the embedded argv runs anvil-engine serve with the recipe's model, name and flags on the allocated port", "[driver]") {
    ResolvedLaunch l;
    l.recipe_id = "r";
    l.kind = "embedded";
    l.model_path = "/models/tiny";
    l.served_model_name = "tiny-chat";
    l.arguments = {"--weights", "q8"};
    l.host = "127.0.0.1";
    l.port = 23456;
    CHECK(embedded_argv("/bin/anvil-engine", l) ==
          std::vector<std::string>{"/bin/anvil-engine", "serve", "--model", "/models/tiny", "--served-model-name", "tiny-chat",
                                   "--host", "127.0.0.1", "--port", "23456", "--weights", "q8"});
    // On GPUs: the first visible one (the process driver sets CUDA_VISIBLE_DEVICES to those given).
    l.gpu_count = 1;
    CHECK(embedded_argv("/bin/anvil-engine", l) ==
          std::vector<std::string>{"/bin/anvil-engine", "serve", "--model", "/models/tiny", "--served-model-name", "tiny-chat",
                                   "--device", "cuda:0", "--host", "127.0.0.1", "--port", "23456", "--weights", "q8"});
    l.gpu_uuids = {"GPU-1f2e"};
    CHECK(embedded_argv("/bin/anvil-engine", l) ==
          std::vector<std::string>{"/bin/anvil-engine", "serve", "--model", "/models/tiny", "--served-model-name", "tiny-chat",
                                   "--device", "cuda:0", "--host", "127.0.0.1", "--port", "23456", "--weights", "q8"});
    l.model_path.reset();
    CHECK_THROWS_WITH(embedded_argv("/bin/anvil-engine", l), Catch::Contains("/launch/model/path"));
}

TEST_CASE("engine keys: a fresh one in the variable each engine reads, always, none where only a flag would do", "[driver][launch]") {
    using anvil::drivers::api_key_variable;
    CHECK(api_key_variable("embedded", "anvil-engine") == "ANVIL_ENGINE_API_KEY");
    CHECK(api_key_variable("process", "anvil-engine") == "ANVIL_ENGINE_API_KEY");
    CHECK(api_key_variable("docker", "vLLM") == "VLLM_API_KEY");
    CHECK(api_key_variable("process", "llama.cpp") == "LLAMA_API_KEY");
    CHECK_FALSE(api_key_variable("docker", "sglang"));

    anvil::drivers::ResolvedLaunch a, b;
    a.kind = b.kind = "docker";
    anvil::drivers::assign_api_key(a, "vllm");
    anvil::drivers::assign_api_key(b, "vllm");
    CHECK(a.api_key.size() == 64);
    CHECK(a.environment.at("VLLM_API_KEY") == a.api_key);
    CHECK(a.api_key != b.api_key);

    // A value already there (no recipe can set it: registry/engine_environment) is replaced.
    anvil::drivers::ResolvedLaunch own;
    own.kind = "docker";
    own.environment["VLLM_API_KEY"] = "the-recipe's";
    anvil::drivers::assign_api_key(own, "vllm");
    CHECK(own.api_key.size() == 64);
    CHECK(own.environment.at("VLLM_API_KEY") == own.api_key);

    anvil::drivers::ResolvedLaunch flag_only;
    flag_only.kind = "docker";
    anvil::drivers::assign_api_key(flag_only, "sglang");
    CHECK(flag_only.api_key.empty());
    CHECK(flag_only.environment.empty());
}
