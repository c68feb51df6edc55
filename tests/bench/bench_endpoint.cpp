// The stable endpoint's overhead: short non-streaming completions (max_tokens 1-4) against one real
// anvil-engine on the small model, sent directly to the engine and through an in-process
// StableEndpoint, alternating phases so that the machine's load drifts equally over both.
//   latency:    one client, p50/p99 per request; the endpoint's added p50 (target < 1 ms)
//   throughput: N clients, requests per second; endpoint / direct (target >= 0.95), over several
//               rounds of one direct and one endpoint phase each
// The engine runs on CPUs of its own (the lower half) and the clients and the endpoint on the rest,
// as on a serving machine where the engine's cores are not shared with the daemon; without that,
// on a machine of 2 cores the endpoint's CPU is taken from the engine's and the ratio measures how
// busy the cores are. `shared` as the fifth argument measures that instead.
// Usage: bench_endpoint [clients=8] [seconds per phase=3] [Accept-Encoding, e.g. identity]
//                       [engine sequences=4] [placement: split|shared] [rounds=3]
#include <httplib.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench_support.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "test_support.hpp"

using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

struct Phase {
    std::vector<double> latencies_ms;
    std::size_t errors = 0;
    double seconds = 0;
    double cpu_seconds = 0;  // this process's CPU time: the clients, plus the endpoint when it is used
    double rps() const { return double(latencies_ms.size()) / seconds; }
};

double process_cpu_seconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, std::size_t(p * double(v.size())))];
}

// `clients` threads, each with its own keep-alive connection, sending for `seconds`.
// Accept-Encoding of the clients: empty for httplib's default (it asks for compressed responses).
std::string g_accept_encoding;

Phase run_phase(int port, int clients, double seconds) {
    Phase phase;
    std::mutex mutex;
    const double cpu_start = process_cpu_seconds();
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
        threads.emplace_back([&, c] {
            // Named so that a profile (perf report --sort comm) tells the clients from the endpoint.
            pthread_setname_np(pthread_self(), "bench-client");
            httplib::Client client("127.0.0.1", port);
            client.set_keep_alive(true);
            client.set_tcp_nodelay(true);
            client.set_read_timeout(60, 0);
            httplib::Headers headers;
            if (!g_accept_encoding.empty()) headers.emplace("Accept-Encoding", g_accept_encoding);
            std::vector<double> mine;
            std::size_t errors = 0;
            for (int i = 0; Clock::now() < end; ++i) {
                const json body = {{"prompt", "Bench " + std::to_string(c) + " " + std::to_string(i % 8)},
                                   {"max_tokens", 1 + i % 4},
                                   {"temperature", 0}};
                const auto t0 = Clock::now();
                auto res = client.Post("/v1/completions", headers, body.dump(), "application/json");
                const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                if (res && res->status == 200) mine.push_back(ms);
                else ++errors;
            }
            std::lock_guard<std::mutex> lock(mutex);
            phase.latencies_ms.insert(phase.latencies_ms.end(), mine.begin(), mine.end());
            phase.errors += errors;
        });
    }
    for (auto& t : threads) t.join();
    phase.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    phase.cpu_seconds = process_cpu_seconds() - cpu_start;
    return phase;
}

Phase merge(const Phase& a, const Phase& b) {
    Phase m = a;
    m.latencies_ms.insert(m.latencies_ms.end(), b.latencies_ms.begin(), b.latencies_ms.end());
    m.errors += b.errors;
    m.seconds += b.seconds;
    m.cpu_seconds += b.cpu_seconds;
    return m;
}

std::string cpu_list(const cpu_set_t& set) {
    std::string out;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set)) out += (out.empty() ? "" : ",") + std::to_string(cpu);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    const int clients = argc > 1 ? std::stoi(argv[1]) : 8;
    const double seconds = argc > 2 ? std::stod(argv[2]) : 3.0;
    if (argc > 3) g_accept_encoding = argv[3];
    // More clients than the engine batches keep it busy: throughput is the engine's rate, not the
    // clients' round trips.
    const int sequences = argc > 4 ? std::stoi(argv[4]) : 4;
    const bool split = !(argc > 5 && std::string(argv[5]) == "shared");
    const int rounds = argc > 6 ? std::max(1, std::stoi(argv[6])) : 3;
    spdlog::set_level(spdlog::level::warn);
    anvil::test::TempDir dir;
    const auto model = dir / "small";
    if (anvil::test::run({ANVIL_ENGINE, "make-model", "--out", model.string(), "--preset", "small", "--seed", "1"}).exit_code != 0) {
        std::fprintf(stderr, "bench_endpoint: make-model failed\n");
        return 1;
    }

    // The engine inherits the CPUs this process has when it is started; afterwards this process
    // (clients and endpoint) moves to the others.
    cpu_set_t all{}, engine_cpus{}, bench_cpus{};
    sched_getaffinity(0, sizeof all, &all);
    const int cpus = CPU_COUNT(&all);
    const bool placed = split && cpus >= 2;
    if (placed) {
        for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu) {
            if (!CPU_ISSET(cpu, &all)) continue;
            CPU_SET(cpu, seen++ < cpus / 2 ? &engine_cpus : &bench_cpus);
        }
        sched_setaffinity(0, sizeof engine_cpus, &engine_cpus);
    }
    anvil::test::ChildProcess engine({ANVIL_ENGINE, "serve", "--model", model.string(), "--host", "127.0.0.1", "--port", "0",
                                      "--served-model-name", "small", "--max-seqs", std::to_string(std::max(sequences, 1)),
                                      "--threads", "1"});
    if (placed) sched_setaffinity(0, sizeof bench_cpus, &bench_cpus);
    int port = 0;
    const std::string marker = "listening on http://127.0.0.1:";
    for (std::string line; port == 0 && engine.read_line(line, 60000);)
        if (const auto at = line.find(marker); at != std::string::npos) port = std::atoi(line.c_str() + at + marker.size());
    if (port == 0) {
        std::fprintf(stderr, "bench_endpoint: the engine did not say its port\n");
        return 1;
    }
    httplib::Client probe("127.0.0.1", port);
    for (auto h = probe.Get("/health"); !h || h->status != 200; h = probe.Get("/health"))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));

    anvil::endpoint::StableEndpoint endpoint(anvil::endpoint::EndpointOptions{});
    endpoint.start();
    endpoint.switch_to(anvil::endpoint::Upstream{"127.0.0.1", port, "small", "bench-engine", "bench-recipe"});

    std::printf("bench_endpoint: small model, %d clients, engine batch of %d, %.1f s per phase, %d rounds, Accept-Encoding %s, "
                "load average before: %s\n",
                clients, sequences, seconds, rounds, g_accept_encoding.empty() ? "(httplib default)" : g_accept_encoding.c_str(),
                anvil::bench::load_average().c_str());
    if (placed)
        std::printf("  engine on CPUs %s; clients and endpoint on CPUs %s\n", cpu_list(engine_cpus).c_str(), cpu_list(bench_cpus).c_str());
    else
        std::printf("  engine, clients and endpoint share CPUs %s\n", cpu_list(all).c_str());
    run_phase(port, 1, 0.5);  // warm both paths: the engine's first requests and the endpoint's pool
    run_phase(endpoint.port(), 1, 0.5);

    // Alternating direct / endpoint phases, so drift in the machine's load hits both.
    const Phase l1 = run_phase(port, 1, seconds / 2), e1 = run_phase(endpoint.port(), 1, seconds / 2);
    const Phase l2 = run_phase(port, 1, seconds / 2), e2 = run_phase(endpoint.port(), 1, seconds / 2);
    const Phase lat_direct = merge(l1, l2), lat_endpoint = merge(e1, e2);
    Phase thr_direct, thr_endpoint;
    std::vector<double> round_ratios;
    for (int r = 0; r < rounds; ++r) {
        const Phase d = run_phase(port, clients, seconds), e = run_phase(endpoint.port(), clients, seconds);
        round_ratios.push_back(e.rps() / d.rps());
        thr_direct = r == 0 ? d : merge(thr_direct, d);
        thr_endpoint = r == 0 ? e : merge(thr_endpoint, e);
    }

    const auto row = [](const char* name, const Phase& p) {
        std::printf("  %-22s %7zu requests  p50 %7.3f ms  p99 %7.3f ms  %8.1f req/s  %zu errors\n", name, p.latencies_ms.size(),
                    percentile(p.latencies_ms, 0.5), percentile(p.latencies_ms, 0.99), p.rps(), p.errors);
    };
    row("direct, 1 client", lat_direct);
    row("endpoint, 1 client", lat_endpoint);
    row("direct, N clients", thr_direct);
    row("endpoint, N clients", thr_endpoint);
    const double added_p50 = percentile(lat_endpoint.latencies_ms, 0.5) - percentile(lat_direct.latencies_ms, 0.5);
    const double added_p99 = percentile(lat_endpoint.latencies_ms, 0.99) - percentile(lat_direct.latencies_ms, 0.99);
    const double ratio = thr_endpoint.rps() / thr_direct.rps();
    std::printf("  added p50 latency %.3f ms (target < 1 ms), added p99 %.3f ms\n", added_p50, added_p99);
    std::string rounds_text;
    for (double r : round_ratios) rounds_text += (rounds_text.empty() ? "" : ", ") + std::to_string(r).substr(0, 5);
    std::printf("  throughput endpoint/direct at %d clients: %.3f (target >= 0.95); per round: %s\n", clients, ratio,
                rounds_text.c_str());
    // The endpoint's CPU per request: what it takes from the engine where they share cores.
    const auto per_request_us = [](const Phase& p) { return 1e6 * p.cpu_seconds / double(std::max<std::size_t>(p.latencies_ms.size(), 1)); };
    std::printf("  endpoint CPU per request %.1f us (this process per request: %.1f us direct, %.1f us through the endpoint)\n",
                per_request_us(thr_endpoint) - per_request_us(thr_direct), per_request_us(thr_direct), per_request_us(thr_endpoint));
    std::printf("  load average after: %s\n", anvil::bench::load_average().c_str());
    endpoint.stop();
    engine.kill(SIGTERM);
    engine.wait();
    const bool errors = lat_direct.errors + lat_endpoint.errors + thr_direct.errors + thr_endpoint.errors > 0;
    return errors ? 1 : 0;
}
