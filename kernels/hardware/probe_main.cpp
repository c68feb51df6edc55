// anvil-collective-probe --gpus UUID[,UUID…] [--min-bytes N] [--max-bytes N]
//
// One process, one NCCL communicator per GPU (ncclCommInitAll; one GPU is the single-rank path):
// float32 sum all-reduces from --min-bytes to --max-bytes, doubling; each result is checked on
// the host against the exact sum, and each size timed for algorithm and bus bandwidth. Prints one
// JSON line on stdout, {"ok": true, …} or {"ok": false, "stage", "error"}; exit 0 or 1. Before each
// step it writes "anvil-collective-probe: stage: …" to stderr, so a parent that kills it at a
// deadline knows where it hung. NCCL's own log (NCCL_DEBUG, set by the parent) goes to stderr too.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string g_stage = "start";

void stage(const std::string& s) {
    g_stage = s;
    std::fprintf(stderr, "anvil-collective-probe: stage: %s\n", s.c_str());
    std::fflush(stderr);
}

void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw Failure(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void nccl_ok(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    std::string message = std::string(what) + ": " + ncclGetErrorString(r);
    if (const char* last = ncclGetLastError(nullptr); last && *last) message += ": " + std::string(last);
    throw Failure(message);
}

std::string version_text(int v, int major_divisor) {  // 13000 → "13.0"; NCCL 22703 → "2.27.3"
    if (major_divisor == 10000) return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string uuid_text(const cudaUUID_t& u) {
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    char buf[64];
    std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                  b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return buf;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= s.size()) {
        const std::size_t comma = s.find(',', start);
        const std::string word = s.substr(start, comma - start);
        if (!word.empty()) out.push_back(word);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

struct Rank {
    int device = -1;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    float* send = nullptr;
    float* recv = nullptr;
};

// Fills `out` as it goes, so a failure still reports the versions and the rank map.
void run(json& out, const std::vector<std::string>& wanted, std::int64_t min_bytes, std::int64_t max_bytes) {
    stage("reading NCCL, CUDA runtime and driver versions");
    int nccl = 0, runtime = 0, driver = 0;
    nccl_ok(ncclGetVersion(&nccl), "ncclGetVersion");
    out["nccl_version"] = version_text(nccl, 10000);
    cuda_ok(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    out["cuda_runtime_version"] = version_text(runtime, 1000);
    cuda_ok(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    out["cuda_driver_version"] = driver ? version_text(driver, 1000) : "none";
    if (driver == 0) throw Failure("no NVIDIA driver: CUDA finds no driver library (libcuda), so there is no GPU to probe");

    stage("finding the GPUs");
    int count = 0;
    cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    std::vector<Rank> ranks(wanted.size());
    json map = json::array();
    for (std::size_t r = 0; r < wanted.size(); ++r) {
        for (int d = 0; d < count && ranks[r].device < 0; ++d) {
            cudaDeviceProp p{};
            cuda_ok(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties");
            if (uuid_text(p.uuid) == wanted[r] || std::to_string(d) == wanted[r]) ranks[r].device = d;
        }
        if (ranks[r].device < 0) throw Failure(wanted[r] + " is not among the " + std::to_string(count) + " GPUs CUDA sees");
        cudaDeviceProp p{};
        cuda_ok(cudaGetDeviceProperties(&p, ranks[r].device), "cudaGetDeviceProperties");
        char bus[32] = {};
        cuda_ok(cudaDeviceGetPCIBusId(bus, sizeof bus, ranks[r].device), "cudaDeviceGetPCIBusId");
        map.push_back({{"rank", r}, {"cuda_device", ranks[r].device}, {"uuid", uuid_text(p.uuid)}, {"name", p.name}, {"pci_bus_id", bus}});
    }
    out["ranks"] = map;

    const int n = static_cast<int>(ranks.size());
    const std::size_t max_count = static_cast<std::size_t>(max_bytes) / sizeof(float);
    stage("allocating " + std::to_string(max_bytes >> 20) + " MiB buffers");
    std::vector<float> host(max_count);  // rank r's element i is i mod 251 + r: every sum is exact in float32
    for (int r = 0; r < n; ++r) {
        cuda_ok(cudaSetDevice(ranks[r].device), "cudaSetDevice");
        cuda_ok(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking), "cudaStreamCreate");
        cuda_ok(cudaMalloc(&ranks[r].send, max_count * sizeof(float)), "cudaMalloc");
        cuda_ok(cudaMalloc(&ranks[r].recv, max_count * sizeof(float)), "cudaMalloc");
        for (std::size_t i = 0, k = 0; i < max_count; ++i, k = k == 250 ? 0 : k + 1) host[i] = static_cast<float>(k + static_cast<std::size_t>(r));
        cuda_ok(cudaMemcpy(ranks[r].send, host.data(), max_count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
    }

    stage("ncclCommInitAll over " + std::to_string(n) + " GPU" + (n == 1 ? "" : "s"));
    std::vector<ncclComm_t> comms(ranks.size());
    std::vector<int> devices;
    for (const auto& r : ranks) devices.push_back(r.device);
    nccl_ok(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
    for (int r = 0; r < n; ++r) ranks[r].comm = comms[r];

    auto all_reduce = [&](std::size_t elements) {
        nccl_ok(ncclGroupStart(), "ncclGroupStart");
        for (auto& r : ranks)
            nccl_ok(ncclAllReduce(r.send, r.recv, elements, ncclFloat, ncclSum, r.comm, r.stream), "ncclAllReduce");
        nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    };
    auto synchronize = [&] {
        for (auto& r : ranks) {
            cuda_ok(cudaSetDevice(r.device), "cudaSetDevice");
            cuda_ok(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
        }
    };

    json results = json::array();
    const float offset = static_cast<float>(n * (n - 1) / 2);  // Σ rank
    for (std::int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        const std::size_t elements = static_cast<std::size_t>(bytes) / sizeof(float);
        const std::string size = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes >> 10) + " KiB";
        stage("all-reduce of " + size);
        for (auto& r : ranks) {  // stale sums from an earlier size must not pass for this one's
            cuda_ok(cudaSetDevice(r.device), "cudaSetDevice");
            cuda_ok(cudaMemsetAsync(r.recv, 0xff, static_cast<std::size_t>(bytes), r.stream), "cudaMemsetAsync");
        }
        all_reduce(elements);  // warm-up
        synchronize();
        const int iterations = static_cast<int>(std::clamp<std::int64_t>((512ll << 20) / bytes, 2, 20));
        const auto t0 = Clock::now();
        for (int i = 0; i < iterations; ++i) all_reduce(elements);
        synchronize();
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / iterations;

        stage("checking the all-reduce of " + size);
        bool verified = true;
        json mismatch;
        for (int r = 0; r < n && verified; ++r) {
            cuda_ok(cudaMemcpy(host.data(), ranks[r].recv, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
            for (std::size_t i = 0, k = 0; i < elements; ++i, k = k == 250 ? 0 : k + 1) {  // k = i mod 251, without a division
                const float expected = static_cast<float>(n) * static_cast<float>(k) + offset;
                if (host[i] != expected) {
                    verified = false;
                    mismatch = {{"rank", r}, {"element", i}, {"expected", expected}, {"found", host[i]}};
                    break;
                }
            }
        }
        const double algbw = static_cast<double>(bytes) / seconds / 1e9;
        json entry{{"bytes", bytes},
                   {"iterations", iterations},
                   {"seconds", seconds},
                   {"algbw_gbps", algbw},
                   {"busbw_gbps", algbw * 2.0 * (n - 1) / n},
                   {"verified", verified}};
        if (!verified) entry["mismatch"] = mismatch;
        results.push_back(entry);
        if (!verified) {
            out["results"] = results;
            throw Failure("all-reduce of " + size + " gave a wrong sum: " + mismatch.dump());
        }
    }
    out["results"] = results;

    stage("tearing down");
    for (auto& r : ranks) {
        nccl_ok(ncclCommDestroy(r.comm), "ncclCommDestroy");
        cuda_ok(cudaSetDevice(r.device), "cudaSetDevice");
        cuda_ok(cudaFree(r.send), "cudaFree");
        cuda_ok(cudaFree(r.recv), "cudaFree");
        cuda_ok(cudaStreamDestroy(r.stream), "cudaStreamDestroy");
    }
    out["ok"] = true;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> gpus;
    std::int64_t min_bytes = 1024, max_bytes = 256ll << 20;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "--gpus" && v) gpus = split(argv[++i]);
        else if (a == "--min-bytes" && v) min_bytes = std::strtoll(argv[++i], nullptr, 10);
        else if (a == "--max-bytes" && v) max_bytes = std::strtoll(argv[++i], nullptr, 10);
        else {
            std::cerr << "usage: anvil-collective-probe --gpus UUID[,UUID…] [--min-bytes N] [--max-bytes N]\n";
            return 2;
        }
    }
    if (gpus.empty() || min_bytes < 4 || min_bytes % 4 != 0 || max_bytes < min_bytes) {
        std::cerr << "anvil-collective-probe: give --gpus, and sizes that are multiples of 4 with min ≤ max\n";
        return 2;
    }
    json result{{"ok", false}};
    try {
        run(result, gpus, min_bytes, max_bytes);
    } catch (const std::exception& e) {
        result["ok"] = false;
        result["stage"] = g_stage;
        result["error"] = e.what();
    }
    std::cout << result.dump() << std::endl;
    return result.value("ok", false) ? 0 : 1;
}
