// Quality sampling over /v1/completions and the comparison of two sample sets (KL estimator,
// top-1 agreement, quality score). The estimator is described in docs/QUALIFICATION.md.
#include "daemon/qualify/quality.hpp"

#include <cmath>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

namespace anvil::qualify {

using nlohmann::json;

namespace detail {

namespace {

// Six fixed prompts of different kinds (prose, code, list, dialogue, facts, arithmetic): the
// positions are the same on every run, so samples replay and receipts compare.
const char* const kQualityPrompts[] = {
    "The old lighthouse keeper climbed the stairs every evening, and",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Ingredients for pancakes:\n1. Flour\n2.",
    "Q: What is the capital of France?\nA:",
    "Water boils at a temperature of",
    "12 + 7 = 19\n23 + 5 = 28\n31 + 4 =",
};

// The first position's top_logprobs of a completion, as {token: logprob}; engines send an object
// (OpenAI's legacy shape) or a list of {token, logprob}.
std::optional<json> first_top_logprobs(const json& reply) {
    if (!reply.is_object() || !reply.contains("choices") || !reply["choices"].is_array() || reply["choices"].empty())
        return std::nullopt;
    const json& lp = reply["choices"][0].value("logprobs", json());
    if (!lp.is_object() || !lp.contains("top_logprobs") || !lp["top_logprobs"].is_array() || lp["top_logprobs"].empty())
        return std::nullopt;
    const json& top = lp["top_logprobs"][0];
    json out = json::object();
    if (top.is_object()) {
        for (auto it = top.begin(); it != top.end(); ++it)
            if (it.value().is_number()) out[it.key()] = it.value().get<double>();
    } else if (top.is_array()) {
        for (const auto& e : top)
            if (e.is_object() && e.contains("token") && e["token"].is_string() && e.contains("logprob") && e["logprob"].is_number())
                out[e["token"].get<std::string>()] = e["logprob"].get<double>();
    }
    // The greedy pick itself is the true top-1. Engines that key top_logprobs by token text merge
    // tokens that print alike (anvil-engine prints every partial UTF-8 byte token as U+FFFD, and
    // the last one listed wins), so the pick's own logprob restores the first place where a
    // lesser namesake overwrote it.
    if (lp.contains("tokens") && lp["tokens"].is_array() && !lp["tokens"].empty() && lp["tokens"][0].is_string() &&
        lp.contains("token_logprobs") && lp["token_logprobs"].is_array() && !lp["token_logprobs"].empty() &&
        lp["token_logprobs"][0].is_number()) {
        const std::string token = lp["tokens"][0];
        const double logprob = lp["token_logprobs"][0];
        if (!out.contains(token) || out[token].get<double>() < logprob) out[token] = logprob;
    }
    if (out.empty()) return std::nullopt;
    return out;
}

// Samples the next-token distribution at `prefix` into `samples`, or notes why it could not.
void sample_at(RunContext& run, json& samples, int prompt, int index, const std::string& prefix) {
    json body = completion_body(run, prefix, 1);
    body["logprobs"] = run.plan.top_logprobs;
    const Exchange x = run.client.post("quality", "/v1/completions", body);
    const std::string where = "prompt " + std::to_string(prompt) + " position " + std::to_string(index) + ": ";
    if (!x.ok()) {
        samples["errors"].push_back(where + x.failure());
        return;
    }
    const auto top = x.json() ? first_top_logprobs(*x.json()) : std::nullopt;
    if (!top) {
        samples["errors"].push_back(where + "no top_logprobs in the reply");
        return;
    }
    samples["positions"].push_back({{"prompt", prompt}, {"index", index}, {"prefix", prefix}, {"top_logprobs", *top}});
}

json empty_samples(const RunContext& run) {
    return {{"schema", "anvil.quality-samples/v1"},
            {"endpoint", "/v1/completions"},
            {"top_logprobs", run.plan.top_logprobs},
            {"positions", json::array()},
            {"errors", json::array()}};
}

}  // namespace

json draw_quality_samples(RunContext& run) {
    json samples = empty_samples(run);
    const int positions = std::max(run.plan.quality_positions, 1);
    for (int p = 0; p < int(std::size(kQualityPrompts)); ++p) {
        const std::string prompt = kQualityPrompts[p];
        // The greedy continuation, with its tokens' texts (logprobs 0: the tokens, no alternatives).
        json body = completion_body(run, prompt, positions);
        body["logprobs"] = 0;
        const Exchange x = run.client.post("quality", "/v1/completions", body);
        const auto reply = x.ok() ? x.json() : std::nullopt;
        if (!reply) {
            samples["errors"].push_back("prompt " + std::to_string(p) + ": " + (x.ok() ? "the reply is not JSON" : x.failure()));
            continue;
        }
        const std::string text = reply_text(*reply);
        std::vector<std::string> pieces;
        const json& lp = (*reply)["choices"][0].value("logprobs", json());
        if (lp.is_object() && lp.contains("tokens") && lp["tokens"].is_array())
            for (const auto& t : lp["tokens"]) pieces.push_back(t.is_string() ? t.get<std::string>() : "");
        // Prefixes are the prompt plus whole tokens of the continuation, as long as the tokens'
        // texts spell the continuation: a token that is part of a character (shown as U+FFFD or
        // a bytes: marker) cannot be cut at, so sampling stops before it.
        std::size_t spelled = 0, usable = 0;
        for (const auto& piece : pieces) {
            if (piece.empty() || text.compare(spelled, piece.size(), piece) != 0) break;
            spelled += piece.size();
            ++usable;
        }
        std::string continuation;
        for (int i = 0; i < positions && std::size_t(i) <= usable; ++i) {
            if (i > 0) continuation += pieces[std::size_t(i - 1)];
            sample_at(run, samples, p, i, prompt + continuation);
        }
    }
    return samples;
}

json replay_quality_samples(RunContext& run, const json& control) {
    json samples = empty_samples(run);
    if (!control.is_object() || !control.contains("positions") || !control["positions"].is_array()) {
        samples["errors"].push_back("the control's samples have no positions");
        return samples;
    }
    for (const auto& pos : control["positions"]) {
        if (!pos.is_object() || !pos.contains("prefix") || !pos["prefix"].is_string()) continue;
        sample_at(run, samples, pos.value("prompt", 0), pos.value("index", 0), pos["prefix"].get<std::string>());
    }
    return samples;
}

}  // namespace detail

namespace {

// A candidate that is certain a token cannot occur where the control gives it mass would make
// KL infinite; 1e-6 bounds one position's contribution at about 14 nats per unit of mass.
constexpr double kProbabilityFloor = 1e-6;

// Top-k {token: logprob} completed into a distribution over `tokens` plus one bucket for the rest
// of the vocabulary: listed tokens keep their probability; the leftover mass 1 - Σ listed is
// spread evenly over the tokens of `tokens` this side did not list and the rest bucket, each share
// capped at the smallest listed probability (an unlisted token cannot be likelier than a listed one);
// what the caps withhold stays in the rest bucket.
std::pair<std::map<std::string, double>, double> complete(const json& top, const std::set<std::string>& tokens) {
    std::map<std::string, double> p;
    double mass = 0, smallest = 1;
    for (auto it = top.begin(); it != top.end(); ++it) {
        const double q = std::exp(it.value().get<double>());
        p[it.key()] = q;
        mass += q;
        smallest = std::min(smallest, q);
    }
    const double left = std::max(0.0, 1.0 - mass);
    std::size_t missing = 0;
    for (const auto& t : tokens) missing += p.count(t) ? 0 : 1;
    const double share = std::min(left / double(missing + 1), smallest);
    for (const auto& t : tokens)
        if (!p.count(t)) p[t] = share;
    return {p, std::max(0.0, left - share * double(missing))};
}

std::string top1(const json& top) {
    std::string best;
    double best_lp = -INFINITY;
    for (auto it = top.begin(); it != top.end(); ++it) {
        const double lp = it.value().get<double>();
        // Ties go to the smaller token text, the same rule on both sides.
        if (lp > best_lp || (lp == best_lp && it.key() < best)) best = it.key(), best_lp = lp;
    }
    return best;
}

bool valid_top(const json& top) {
    if (!top.is_object() || top.empty()) return false;
    for (auto it = top.begin(); it != top.end(); ++it)
        if (!it.value().is_number()) return false;
    return true;
}

}  // namespace

QualityComparison compare_quality(const json& control_samples, const json& candidate_samples) {
    QualityComparison c;
    auto positions = [](const json& samples) {
        return samples.is_object() && samples.contains("positions") && samples["positions"].is_array() ? samples["positions"]
                                                                                                       : json::array();
    };
    std::map<std::string, json> candidate;
    for (const auto& pos : positions(candidate_samples))
        if (pos.is_object() && pos.contains("prefix") && pos["prefix"].is_string() && valid_top(pos.value("top_logprobs", json())))
            candidate.emplace(pos["prefix"].get<std::string>(), pos["top_logprobs"]);

    double kl_sum = 0;
    std::size_t agree = 0;
    for (const auto& pos : positions(control_samples)) {
        if (!pos.is_object() || !pos.contains("prefix") || !pos["prefix"].is_string() || !valid_top(pos.value("top_logprobs", json())))
            continue;
        ++c.control_positions;
        const auto found = candidate.find(pos["prefix"].get<std::string>());
        if (found == candidate.end()) continue;
        const json& P = pos["top_logprobs"];
        const json& Q = found->second;
        std::set<std::string> tokens;
        for (auto it = P.begin(); it != P.end(); ++it) tokens.insert(it.key());
        for (auto it = Q.begin(); it != Q.end(); ++it) tokens.insert(it.key());
        const auto [p, p_rest] = complete(P, tokens);
        const auto [q, q_rest] = complete(Q, tokens);
        double kl = 0;
        for (const auto& t : tokens) {
            const double pt = p.at(t);
            if (pt > 0) kl += pt * std::log(pt / std::max(q.at(t), kProbabilityFloor));
        }
        if (p_rest > 0) kl += p_rest * std::log(p_rest / std::max(q_rest, kProbabilityFloor));
        kl_sum += std::max(0.0, kl);  // rounding can leave a hair below zero
        agree += top1(P) == top1(Q) ? 1 : 0;
        ++c.positions;
    }
    if (c.positions == 0) {
        c.quality_score = 0;
        c.relative_quality_loss = 1;
        return c;
    }
    c.mean_kl = kl_sum / double(c.positions);
    c.top1_agreement = double(agree) / double(c.positions);
    c.quality_score = std::exp(-c.mean_kl) * c.top1_agreement;
    c.relative_quality_loss = 1 - c.quality_score;
    return c;
}

}  // namespace anvil::qualify
