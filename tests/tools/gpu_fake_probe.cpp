// A stand-in anvil-collective-probe for the probe tests on hosts without a GPU: it speaks the real
// probe's protocol (arguments, stage lines and NCCL log on stderr, one JSON line on stdout) and
// behaves as FAKE_PROBE_MODE says:
//   pass   NCCL's channel lines, then a verified result for every size asked for
//   wrong  a result that claims ok but holds an unverified size (the parent must not believe it)
//   hang   a warning, a grandchild in its process group (its pid on stdout), then sleeps forever
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
    std::vector<std::string> gpus;
    long long min_bytes = 1024, max_bytes = 256ll << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--gpus") {
            std::size_t start = 0;
            for (std::size_t comma; (comma = value.find(',', start)) != std::string::npos; start = comma + 1)
                gpus.push_back(value.substr(start, comma - start));
            gpus.push_back(value.substr(start));
        } else if (flag == "--min-bytes") {
            min_bytes = std::atoll(value.c_str());
        } else if (flag == "--max-bytes") {
            max_bytes = std::atoll(value.c_str());
        }
    }
    const char* m = std::getenv("FAKE_PROBE_MODE");
    const std::string mode = m ? m : "pass";
    const char* nccl_debug = std::getenv("NCCL_DEBUG");
    std::fprintf(stderr, "host:1:1 [0] NCCL INFO NCCL_DEBUG seen by the probe: %s\n", nccl_debug ? nccl_debug : "(unset)");
    std::fprintf(stderr, "anvil-collective-probe: stage: ncclCommInitAll over %zu GPUs\n", gpus.size());

    if (mode == "hang") {
        std::fprintf(stderr, "host:1:1 [1] NCCL WARN Cuda failure 'peer access is not supported between these two devices'\n");
        std::fprintf(stderr, "anvil-collective-probe: stage: all-reduce of 64 MiB\n");
        std::fflush(stderr);
        const pid_t child = fork();
        if (child == 0) {
            for (;;) pause();
        }
        std::printf("%d\n", static_cast<int>(child));
        std::fflush(stdout);
        for (;;) pause();
    }

    nlohmann::json ranks = nlohmann::json::array(), results = nlohmann::json::array();
    for (std::size_t r = 0; r < gpus.size(); ++r) {
        ranks.push_back({{"rank", r}, {"cuda_device", r}, {"uuid", gpus[r]}, {"name", "Fake GPU"}, {"pci_bus_id", "0000:00:00.0"}});
        for (std::size_t peer = 0; peer < gpus.size(); ++peer)
            if (peer != r)
                std::fprintf(stderr, "host:1:1 [%zu] NCCL INFO Channel 00/0 : %zu[%zu] -> %zu[%zu] via P2P/CUMEM/read\n", r, r, r, peer, peer);
    }
    for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= 2)
        results.push_back({{"bytes", bytes}, {"iterations", 2}, {"seconds", 1e-5}, {"algbw_gbps", bytes / 1e4}, {"busbw_gbps", bytes / 1e4},
                           {"verified", !(mode == "wrong" && bytes == max_bytes)}});
    const nlohmann::json out{{"ok", true},        {"nccl_version", "2.28.9"}, {"cuda_runtime_version", "13.0"},
                             {"cuda_driver_version", "13.0"}, {"ranks", ranks},           {"results", results}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
}
