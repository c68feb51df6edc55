// `anvil feasibility FILE --format json` end to end (issue 22): a generated campaign of 10,000
// candidates (seed 004's requirements, tests/bench/feasibility_campaign.hpp) written to a file, and
// the built anvil binary run over it as a child process, its stdout redirected to a file: compact
// (the default) and with --pretty. The target is under 1 s of wall time for the compact run.
//
// The baseline, measured in the same run and the same directory, is what the bytes alone cost:
// reading the input file and writing as many bytes as anvil wrote to a new file, with large read
// and write calls. Each run's figure is set against it as a ratio.
//
// Usage: bench_feasibility_cli [count (10000)] [--anvil PATH] [--runs N (5)] [--keep DIR]
//   --keep DIR leaves the campaign and both outputs there (for profiling anvil by hand).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "feasibility_campaign.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using anvil::registry::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kTargetMs = 1000.0;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

double ms(const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) * 1e-3; }

struct Run {
    double wall_ms = 1e300;
    double cpu_ms = 1e300;  // the child's user + system time
    std::uintmax_t bytes = 0;
};

// Runs `argv` with stdout into `out` (stderr into `out`.err); throws unless it exits 0.
Run run_child(const std::vector<std::string>& argv, const fs::path& out) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const std::string out_path = out.string(), err_path = out.string() + ".err";
    const auto start = Clock::now();
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        const int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, STDOUT_FILENO);
        dup2(e, STDERR_FILENO);
        execv(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, 0, &usage) != pid) throw std::runtime_error("wait4 failed");
    Run r;
    r.wall_ms = ms_since(start);
    r.cpu_ms = ms(usage.ru_utime) + ms(usage.ru_stime);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error(argv[0] + " exited " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                                 ": " + anvil::test::read_file(err_path));
    r.bytes = fs::file_size(out);
    return r;
}

Run best_child(int runs, const std::vector<std::string>& argv, const fs::path& out) {
    Run best;
    for (int i = 0; i < runs; ++i) {
        const Run r = run_child(argv, out);
        best.wall_ms = std::min(best.wall_ms, r.wall_ms);
        best.cpu_ms = std::min(best.cpu_ms, r.cpu_ms);
        best.bytes = r.bytes;
    }
    return best;
}

// Reads `in` whole and writes `bytes` bytes to a new file `out`, 1 MiB a call: the least any
// program that reads the campaign and writes its answer must spend on the bytes.
double read_and_write_ms(const fs::path& in, const fs::path& out, std::uintmax_t bytes) {
    const auto start = Clock::now();
    const int fd = open(in.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error("cannot read " + in.string());
    struct stat st{};
    fstat(fd, &st);
    std::string input(static_cast<std::size_t>(st.st_size), '\0');
    for (std::size_t done = 0; done < input.size();) {
        const ssize_t n = read(fd, input.data() + done, input.size() - done);
        if (n <= 0) throw std::runtime_error("short read of " + in.string());
        done += static_cast<std::size_t>(n);
    }
    close(fd);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0) throw std::runtime_error("cannot write " + out.string());
    std::string chunk(1 << 20, ' ');
    // Touch the input so the read cannot be skipped.
    for (std::size_t i = 0; i < chunk.size() && i < input.size(); i += 4096) chunk[i] = input[i];
    for (std::uintmax_t left = bytes; left > 0;) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uintmax_t>(left, chunk.size()));
        if (write(o, chunk.data(), n) != static_cast<ssize_t>(n)) throw std::runtime_error("short write to " + out.string());
        left -= n;
    }
    close(o);
    return ms_since(start);
}

double best_baseline(int runs, const fs::path& in, const fs::path& out, std::uintmax_t bytes) {
    double best = 1e300;
    for (int i = 0; i < runs; ++i) best = std::min(best, read_and_write_ms(in, out, bytes));
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    int count = 10000, runs = 5;
    std::string anvil = ANVIL_CLI;
    std::optional<fs::path> keep;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--anvil" && i + 1 < argc) anvil = argv[++i];
        else if (a == "--runs" && i + 1 < argc) runs = std::stoi(argv[++i]);
        else if (a == "--keep" && i + 1 < argc) keep = argv[++i];
        else if (!a.starts_with("--")) count = std::stoi(a);
        else {
            std::fprintf(stderr, "usage: bench_feasibility_cli [count] [--anvil PATH] [--runs N] [--keep DIR]\n");
            return 2;
        }
    }
    anvil::test::TempDir temp;
    const fs::path dir = keep ? *keep : temp.path();
    fs::create_directories(dir);
    const fs::path input = dir / "campaign.json", compact_out = dir / "out-compact.json", pretty_out = dir / "out-pretty.json",
                   baseline_out = dir / "out-baseline";

    const json doc = anvil::bench::generate_campaign(json::parse(anvil::test::seed_text("004_")), count);
    anvil::test::write_file(input, doc.dump());
    const auto input_bytes = fs::file_size(input);

    try {
        const std::vector<std::string> compact_argv{anvil, "feasibility", input.string(), "--format", "json"};
        std::vector<std::string> pretty_argv = compact_argv;
        pretty_argv.push_back("--pretty");
        run_child(compact_argv, compact_out);  // warm the page cache and the binary
        const Run compact = best_child(runs, compact_argv, compact_out);
        const double compact_base = best_baseline(runs, input, baseline_out, compact.bytes);
        // An anvil from before --pretty (given with --anvil) refuses it: its compact figure stands alone.
        std::optional<Run> pretty;
        std::string pretty_error;
        try {
            pretty = best_child(runs, pretty_argv, pretty_out);
        } catch (const std::exception& e) {
            pretty_error = e.what();
        }
        const double pretty_base = pretty ? best_baseline(runs, input, baseline_out, pretty->bytes) : 0.0;

        // The outputs must be the whole, valid document, and the same one.
        const json a = json::parse(anvil::test::read_file(compact_out));
        if (a["candidates"].size() != static_cast<std::size_t>(count))
            throw std::runtime_error("printed " + std::to_string(a["candidates"].size()) + " candidates, expected " + std::to_string(count));
        if (pretty && json::parse(anvil::test::read_file(pretty_out)) != a)
            throw std::runtime_error("--pretty printed another document than the compact output");

        std::printf("anvil feasibility over %d generated candidates (%.1f MB compact input), best of %d; load %s\n", count,
                    static_cast<double>(input_bytes) / 1e6, runs, anvil::bench::load_average().c_str());
        std::printf("                      wall ms   cpu ms   output MB  read+write baseline ms  ratio\n");
        std::printf("  --format json      %8.1f %8.1f  %9.1f  %22.1f  %5.1fx   target < %.0f ms: %s\n", compact.wall_ms, compact.cpu_ms,
                    static_cast<double>(compact.bytes) / 1e6, compact_base, compact.wall_ms / compact_base, kTargetMs,
                    compact.wall_ms < kTargetMs ? "met" : "MISSED");
        if (pretty)
            std::printf("    --pretty         %8.1f %8.1f  %9.1f  %22.1f  %5.1fx\n", pretty->wall_ms, pretty->cpu_ms,
                        static_cast<double>(pretty->bytes) / 1e6, pretty_base, pretty->wall_ms / pretty_base);
        else
            std::printf("    --pretty         not run: %s\n", pretty_error.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_feasibility_cli: %s\n", e.what());
        return 1;
    }
    return 0;
}
