// What a Slurm job of anvild's runs, without a cluster: the command for a container launch (the
// node's runtime in the foreground, the engine's key by name only), and anvil-job-exec, run as a
// real child process, adding the GPUs Slurm gave the job and HOME before it execs the command.
#include <catch2/catch.hpp>

#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "daemon/drivers/command_runner.hpp"
#include "daemon/drivers/container_driver.hpp"
#include "daemon/drivers/slurm_driver.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
using json = nlohmann::json;

namespace {

const std::string kImage = "registry.example/engine@sha256:" + std::string(64, 'a');

std::filesystem::path job_exec() { return std::filesystem::path(ANVIL_ENGINE).parent_path() / "anvil-job-exec"; }

// anvil-job-exec with exactly this environment, running `argv` (printf prints each word on a line).
CommandResult job(const std::vector<std::string>& argv, std::map<std::string, std::string> environment) {
    environment["ANVIL_JOB_ARGV"] = json(argv).dump();
    environment["PATH"] = "/usr/bin:/bin";
    return run_command({job_exec().string()}, environment);
}

}  // namespace

TEST_CASE("a container launch on Slurm runs the runtime in the foreground, and the engine's key by name only", "[slurm][container]") {
    ContainerDriverOptions o;
    o.runtime = "podman";
    o.global_arguments = {"--root", "/scratch/podman"};
    o.network = "bridge";  // the local driver's choice does not reach the cluster
    EngineHandle e;
    e.engine_id = "e42";
    e.recipe = {"tiny-box", "7"};
    e.port = 8123;
    ResolvedLaunch l;
    l.recipe_id = "tiny-box";
    l.kind = "docker";
    l.image = kImage;
    l.arguments = {"serve", "--port", "8123"};
    l.environment = {{"ANVIL_LOG", "info"}, {"ANVIL_ENGINE_API_KEY", "secret-key"}};
    l.api_key = "secret-key";
    l.container_port = 8000;
    l.gpu_count = 2;
    l.gpu_uuids = {"GPU-of-this-host"};

    const JobCommand c = container_job_command(o, e, l);
    const auto& a = c.argv;
    REQUIRE(a.size() > 6);
    CHECK(std::vector<std::string>(a.begin(), a.begin() + 7) == std::vector<std::string>{"podman", "--root", "/scratch/podman", "run", "--rm", "--name", "anvil-e42"});
    CHECK(std::find(a.begin(), a.end(), "--detach") == a.end());
    CHECK(std::find(a.begin(), a.end(), "--network=host") != a.end());
    CHECK(std::find(a.begin(), a.end(), "--publish") == a.end());
    CHECK(std::find(a.begin(), a.end(), "ANVIL_LOG=info") != a.end());
    CHECK(std::find(a.begin(), a.end(), "CUDA_VISIBLE_DEVICES=0,1") != a.end());
    CHECK(std::find(a.begin(), a.end(), "nvidia.com/gpu=GPU-of-this-host") == a.end());
    // The key is in no argument: the runtime passes it on from its environment, by name.
    for (const auto& word : a) CHECK(word.find("secret-key") == std::string::npos);
    CHECK(c.environment.at("ANVIL_ENGINE_API_KEY") == "secret-key");
    const auto image = std::find(a.begin(), a.end(), kImage);
    REQUIRE(image != a.end());
    CHECK(*(image - 2) == "--env");
    CHECK(*(image - 1) == "ANVIL_ENGINE_API_KEY");
    CHECK(std::vector<std::string>(image + 1, a.end()) == l.arguments);
    REQUIRE(c.gpu_devices_at);
    CHECK(*c.gpu_devices_at == static_cast<std::size_t>(image - a.begin()));
    // When Slurm ends the job, the container is stopped by name, inside Slurm's KillWait.
    CHECK(c.stop_argv == std::vector<std::string>{"podman", "--root", "/scratch/podman", "stop", "--time",
                                                  std::to_string(kContainerJobStopSeconds), "anvil-e42"});

    l.gpu_count = 0;
    CHECK_FALSE(container_job_command(o, e, l).gpu_devices_at);
    l.image = "registry.example/engine:latest";
    CHECK_THROWS_WITH(container_job_command(o, e, l), Catch::Contains("is not pinned by digest"));
}

TEST_CASE("anvil-job-exec runs the command as given, with a --device for each GPU Slurm gave the job", "[slurm][container]") {
    const std::vector<std::string> argv = {"printf", "%s\\n", "run", "--rm", kImage, "serve"};
    auto r = job(argv, {{"ANVIL_JOB_GPU_DEVICES_AT", "4"}, {"SLURM_JOB_GPUS", "0,2"}, {"HOME", "/tmp"}});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == "run\n--rm\n--device=nvidia.com/gpu=0\n--device=nvidia.com/gpu=2\n" + kImage + "\nserve\n");
    // Without SLURM_JOB_GPUS, the job's CUDA_VISIBLE_DEVICES.
    r = job(argv, {{"ANVIL_JOB_GPU_DEVICES_AT", "4"}, {"CUDA_VISIBLE_DEVICES", "3"}, {"HOME", "/tmp"}});
    CHECK(r.out == "run\n--rm\n--device=nvidia.com/gpu=3\n" + kImage + "\nserve\n");
    // No position: the command exactly as given.
    r = job(argv, {{"SLURM_JOB_GPUS", "0"}, {"HOME", "/tmp"}});
    CHECK(r.out == "run\n--rm\n" + kImage + "\nserve\n");

    r = job(argv, {{"ANVIL_JOB_GPU_DEVICES_AT", "4"}, {"HOME", "/tmp"}});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("the job asked for GPUs, but Slurm gave it none"));
    for (const std::string bad : {"0", "6", "x", "4x", ""}) {
        r = job(argv, {{"ANVIL_JOB_GPU_DEVICES_AT", bad}, {"SLURM_JOB_GPUS", "0"}, {"HOME", "/tmp"}});
        INFO(bad);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.err, Catch::Contains("ANVIL_JOB_GPU_DEVICES_AT is not a position inside the command"));
    }
}

TEST_CASE("anvil-job-exec gives the command HOME from the user's entry when the job has none, and refuses a bad command", "[slurm]") {
    const passwd* me = getpwuid(getuid());
    REQUIRE(me);
    auto r = job({"printenv", "HOME"}, {});
    CHECK(r.exit_code == 0);
    CHECK(r.out == std::string(me->pw_dir) + "\n");
    r = job({"printenv", "HOME"}, {{"HOME", "/srv/site-home"}});
    CHECK(r.out == "/srv/site-home\n");
    // It leaves no trace of how it was started.
    r = job({"printenv", "ANVIL_JOB_ARGV"}, {});
    CHECK(r.exit_code == 1);

    r = job({"/nonexistent/engine"}, {});
    CHECK(r.exit_code == 127);
    CHECK_THAT(r.err, Catch::Contains("cannot run /nonexistent/engine"));
    r = run_command({job_exec().string()}, std::map<std::string, std::string>{{"ANVIL_JOB_ARGV", R"(["ok", 3])"}});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("not a JSON array of strings"));
}

TEST_CASE("an embedded engine's job asks for its threads and its memory on paper, never less than the placement's", "[slurm]") {
    auto c = embedded_job_command({"anvil-engine", "serve", "--model", "/m"}, {{"A", "1"}}, 4);
    CHECK(c.argv == std::vector<std::string>{"anvil-engine", "serve", "--model", "/m", "--threads", "4"});
    CHECK(c.cpus == 4);
    CHECK(c.environment.at("A") == "1");
    c = embedded_job_command({"anvil-engine", "serve", "--threads", "12"}, {}, 4);
    CHECK(c.argv == std::vector<std::string>{"anvil-engine", "serve", "--threads", "12"});
    CHECK(c.cpus == 12);
    CHECK(embedded_job_command({"anvil-engine", "--threads=6"}, {}, 2).cpus == 6);
    CHECK(embedded_job_command({"anvil-engine", "--threads", "0"}, {}, 2).argv.back() == "2");

    SlurmPlacement p;
    ResolvedLaunch l;
    CHECK_FALSE(job_memory_mib(p, l));  // the partition's default
    p.memory_mib_per_engine = 4096;
    CHECK(job_memory_mib(p, l) == 4096);
    l.memory_bytes = std::int64_t(8) << 30;  // 8 GiB on paper: a quarter more and 512 MiB
    CHECK(job_memory_mib(p, l) == 10240 + 512);
    p.memory_mib_per_engine = 65536;
    CHECK(job_memory_mib(p, l) == 65536);
}

TEST_CASE("anvil-job-exec with a stop command stays the command's parent and runs it when the job is signalled", "[slurm][container]") {
    anvil::test::TempDir dir;
    const std::string stopfile = (dir / "stopped").string();
    // The command stands in for `podman run`: it ignores SIGTERM and ends only once the stop
    // command (standing in for `podman stop`) has run.
    setenv("ANVIL_JOB_ARGV",
           json({"sh", "-c", "trap 'echo got-term' TERM; echo running; while [ ! -e " + stopfile + " ]; do sleep 0.1; done; echo ended; exit 3"})
               .dump()
               .c_str(),
           1);
    setenv("ANVIL_JOB_STOP_ARGV", json({"touch", stopfile}).dump().c_str(), 1);
    anvil::test::ChildProcess job({job_exec().string()});
    unsetenv("ANVIL_JOB_ARGV");
    unsetenv("ANVIL_JOB_STOP_ARGV");
    std::string line;
    REQUIRE(job.read_line(line, 10000));
    CHECK(line == "running");
    CHECK_FALSE(std::filesystem::exists(stopfile));
    job.kill(SIGTERM);
    std::vector<std::string> lines;
    while (job.read_line(line, 10000)) lines.push_back(line);
    CHECK(lines == std::vector<std::string>{"ended"});  // the command itself was not signalled
    CHECK(job.wait() == 3);                              // and its exit status is the job's
    CHECK(std::filesystem::exists(stopfile));
}
