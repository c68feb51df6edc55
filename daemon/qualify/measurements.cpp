// Speed (TTFT, prefill, decode at concurrency 1 and N, a warm task set) and peak memory from
// /proc. Every figure is a median over repeats where the request is short, because the machines
// this runs on are shared and one descheduled request should not decide a promotion.
#include "daemon/qualify/measurements.hpp"
#include "daemon/qualify/metrics_catalogue.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace anvil::qualify::detail {

using nlohmann::json;

namespace {

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

const char* const kDecodePrompts[] = {
    "Once upon a time, in a village by the mountains,",
    "The history of the printing press begins",
    "A list of things to pack for a long journey:",
    "The recipe for bread starts with flour,",
};

// The warm task set: fixed prompts, each with Plan::task_max_tokens (see qualification.hpp).
const char* const kTasks[] = {
    "Summarise in two sentences why the sky looks blue.",
    "Write a short email asking a colleague to move a meeting to Thursday.",
    "Explain what a hash table is to a new programmer.",
    "List five ideas for a weekend project at home.",
};

// One decode stream's figures: tokens generated and when the first and the last arrived.
struct Stream {
    long long tokens = 0;
    double first = 0, end = 0;  // journal seconds
    bool ok = false;
};

Stream decode_stream(const RunContext& run, const std::string& label, const std::string& prompt) {
    json body = completion_body(run, prompt, run.plan.decode_tokens);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    // Fixed work: the decode rate is per token, and a candidate that stops early at an end token
    // would otherwise be measured on a shorter, cheaper tail. Engines that ignore it still count.
    body["ignore_eos"] = true;
    const Exchange x = run.client.post(label, "/v1/completions", body);
    const StreamSummary s = summarize_stream(x);
    Stream out;
    if (!s.error.empty() || !x.first_content_seconds) return out;
    out.tokens = s.completion_tokens.value_or(s.content_events);
    out.first = x.started + *x.first_content_seconds;
    out.end = x.started + x.seconds;
    out.ok = out.tokens >= 2 && out.end > out.first;
    return out;
}

// Enough passes for a median that one slow spell cannot move, few enough to bound a fast engine.
constexpr std::size_t kMaxWarmPasses = 25;

// One pass of the warm task set: the tasks that completed and their summed wall time. `count`
// limits the tasks (the warm-up runs one).
struct TaskPass {
    int tasks = 0, succeeded = 0;
    double seconds = 0;
};

TaskPass task_pass(const RunContext& run, const char* label, std::size_t count = std::size(kTasks)) {
    TaskPass pass;
    for (std::size_t i = 0; i < std::min(count, std::size(kTasks)); ++i) {
        json body = chat_body(run, kTasks[i], run.plan.task_max_tokens);
        body["ignore_eos"] = true;  // fixed work, as for decode
        const Exchange x = run.client.post(label, "/v1/chat/completions", body);
        const auto reply = x.ok() ? x.json() : std::nullopt;
        const std::string finish = reply ? reply_finish_reason(*reply) : "";
        ++pass.tasks;
        pass.succeeded += reply && !reply_text(*reply).empty() && (finish == "stop" || finish == "length") ? 1 : 0;
        pass.seconds += x.seconds;
    }
    return pass;
}

// warm_e2e_seconds (the median pass, only when every task of every pass completed: an e2e time
// is only comparable over the same work) and tasks_per_hour (the median pass's rate then, or
// what succeeded over the time spent otherwise).
void add_warm_e2e(std::vector<Measurement>& out, Journal& journal, const std::vector<TaskPass>& passes) {
    int tasks = 0, succeeded = 0;
    double seconds = 0;
    std::vector<double> totals;
    std::string each;
    for (const auto& p : passes) {
        tasks += p.tasks, succeeded += p.succeeded, seconds += p.seconds;
        totals.push_back(p.seconds);
        each += fmt::format("{}{:.4g}", each.empty() ? "" : ", ", p.seconds);
    }
    if (succeeded == tasks && tasks > 0) {
        const double e2e = median(totals);
        out.push_back({metric::warm_e2e, e2e});
        out.push_back({metric::tasks_per_hour, double(passes.front().tasks) * 3600.0 / e2e});
        journal.note("warm_e2e", fmt::format("the median of {} passes ({} s)", passes.size(), each));
    } else {
        journal.note("warm_e2e", fmt::format("{} of {} tasks succeeded over {} passes", succeeded, tasks, passes.size()));
        if (seconds > 0) out.push_back({metric::tasks_per_hour, succeeded * 3600.0 / seconds});
    }
}

}  // namespace

std::vector<Measurement> measure_speed(RunContext& run) {
    std::vector<Measurement> out;
    Journal& journal = run.journal;

    // TTFT: a short streamed chat request, median of three.
    {
        std::vector<double> ttft;
        for (int i = 0; i < 3; ++i) {
            json body = chat_body(run, "Say hello.", 4);
            body["stream"] = true;
            const Exchange x = run.client.post("ttft", "/v1/chat/completions", body);
            if (summarize_stream(x).error.empty() && x.first_content_seconds) ttft.push_back(*x.first_content_seconds);
        }
        if (ttft.size() == 3) out.push_back({metric::ttft, median(ttft)});
        else journal.note("ttft", "not measured: " + std::to_string(ttft.size()) + " of 3 streams gave a first token");
    }

    // Prefill: a long text prompt answered with one token; usage.prompt_tokens over the time to it.
    // Each prompt starts with a different run number so that a prefix cache cannot answer it.
    {
        long long target = run.plan.prefill_tokens;
        if (run.max_model_len) target = std::min(target, *run.max_model_len / 2);
        const auto nonce = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
        auto prefill = [&](int n, std::size_t sentences) -> std::optional<std::pair<long long, double>> {
            json body = completion_body(run, "Run " + nonce + "-" + std::to_string(n) + ".\n" + filler(sentences), 1);
            body["stream"] = true;
            body["stream_options"] = {{"include_usage", true}};
            const Exchange x = run.client.post("prefill", "/v1/completions", body);
            const StreamSummary s = summarize_stream(x);
            if (!s.error.empty() || !s.prompt_tokens || !x.first_content_seconds || *x.first_content_seconds <= 0)
                return std::nullopt;
            return std::pair{*s.prompt_tokens, *x.first_content_seconds};
        };
        // The first calibrates the tokens per sentence (and warms the engine). It is sized so that
        // even a tokenizer that spends one token per byte keeps it within the target.
        const std::size_t probe = std::clamp<std::size_t>(std::size_t(target) / 80, 1, 16);
        if (auto first = prefill(0, probe); first && first->first > 0) {
            const double per_sentence = double(first->first) / double(probe);
            const auto sentences = std::size_t(std::max(1.0, std::floor(0.95 * double(target) / per_sentence)));
            std::vector<double> rates;
            long long tokens = 0;
            for (int i = 1; i <= 3; ++i)
                if (auto r = prefill(i, sentences)) rates.push_back(double(r->first) / r->second), tokens = r->first;
            if (rates.size() == 3) out.push_back({metric::prefill_rate, median(rates)});
            journal.note("prefill", "prompts of " + std::to_string(tokens) + " tokens (target " + std::to_string(target) + ")");
        } else {
            journal.note("prefill", "not measured: the probe gave no usage.prompt_tokens or no first token");
        }
    }

    // Decode at concurrency 1: tokens after the first over the time after the first, median of
    // three: a client descheduled on a busy machine reads a whole stream at once, and that one
    // stream's rate is absurd (seen: 190,000 tokens/s where the others said 3,000).
    std::optional<double> c1;
    {
        std::vector<double> rates;
        for (int i = 0; i < 3; ++i) {
            const Stream s = decode_stream(run, "decode_c1", kDecodePrompts[i % std::size(kDecodePrompts)]);
            if (s.ok) rates.push_back(double(s.tokens - 1) / (s.end - s.first));
        }
        if (rates.size() == 3) c1 = median(rates), out.push_back({metric::decode_rate_c1, *c1});
        else journal.note("decode_c1", "not measured: a stream failed or gave fewer than two tokens");
    }

    // Decode at concurrency N: N streams at once; the aggregate counts every stream's tokens after
    // its first over the span from the earliest first token to the latest last one.
    {
        const int n = std::max(run.plan.concurrency, 1);
        if (n == 1) {
            if (c1) out.push_back({metric::decode_rate_cn, *c1});
        } else {
            std::vector<Stream> streams(static_cast<std::size_t>(n));
            std::vector<std::thread> threads;
            for (int i = 0; i < n; ++i)
                threads.emplace_back([&, i] { streams[std::size_t(i)] = decode_stream(run, "decode_cN", kDecodePrompts[i % std::size(kDecodePrompts)]); });
            for (auto& t : threads) t.join();
            const bool all = std::all_of(streams.begin(), streams.end(), [](const Stream& s) { return s.ok; });
            if (all) {
                double first = streams[0].first, end = streams[0].end;
                long long tokens = 0;
                for (const auto& s : streams) first = std::min(first, s.first), end = std::max(end, s.end), tokens += s.tokens - 1;
                out.push_back({metric::decode_rate_cn, double(tokens) / (end - first)});
            } else {
                journal.note("decode_cN", "not measured: a stream of " + std::to_string(n) + " failed");
            }
        }
    }

    // Warm end to end: passes of the fixed task set, the median pass the figure, so that a slow
    // spell (seen on a 2-core machine: every task at half speed for most of a second) cannot
    // decide a promotion. At least warm_e2e_passes passes, and more while they add up to less
    // than warm_e2e_min_seconds: a small model's passes are short enough for one spell to cover
    // three of them. The default is not re-measured beside the candidate: it serves live
    // traffic, which queues with the measured requests and makes it look slower than it is
    // (tried: the default measured at half its speed).
    {
        task_pass(run, "warmup", 1);
        std::vector<TaskPass> passes;
        double spent = 0;
        while (int(passes.size()) < std::max(run.plan.warm_e2e_passes, 1) ||
               (spent < run.plan.warm_e2e_min_seconds && passes.size() < kMaxWarmPasses)) {
            passes.push_back(task_pass(run, "warm_e2e"));
            spent += passes.back().seconds;
            // A failed task leaves no e2e figure to refine, and an engine that times out would
            // otherwise cost every pass's worth of timeouts.
            if (passes.back().succeeded < passes.back().tasks) break;
            if (run.plan.cancelled && run.plan.cancelled->load()) break;
        }
        add_warm_e2e(out, journal, passes);
    }
    for (const auto& m : out) spdlog::info("qualify: {} = {:.4g} {}", m.metric, m.value, m.unit);
    return out;
}

namespace {

std::optional<std::uint64_t> peak_rss_bytes(int pid) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    if (!status) return std::nullopt;
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmHWM:", 0) != 0) continue;
        std::istringstream fields(line.substr(6));
        std::uint64_t kb = 0;
        if (fields >> kb) return kb * 1024;
    }
    return std::nullopt;  // a kernel thread or a zombie: no memory of its own
}

// Parent of each process, from /proc/<pid>/stat (the command name may hold spaces and
// parentheses, so the fields are read after the last ')').
std::multimap<int, int> children_by_parent() {
    std::multimap<int, int> children;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
        std::ifstream stat(entry.path() / "stat");
        std::string text;
        if (!std::getline(stat, text)) continue;
        const auto close = text.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream fields(text.substr(close + 1));
        std::string state;
        int parent = 0;
        if (fields >> state >> parent) children.emplace(parent, std::stoi(name));
    }
    return children;
}

}  // namespace

std::optional<std::uint64_t> process_tree_peak_bytes(int pid) {
    auto own = peak_rss_bytes(pid);
    if (!own) return std::nullopt;
    const auto children = children_by_parent();
    std::uint64_t total = 0;
    std::vector<int> pending{pid};
    while (!pending.empty()) {
        const int p = pending.back();
        pending.pop_back();
        total += peak_rss_bytes(p).value_or(0);
        auto [begin, end] = children.equal_range(p);
        for (auto it = begin; it != end; ++it) pending.push_back(it->second);
    }
    return total;
}

}  // namespace anvil::qualify::detail
