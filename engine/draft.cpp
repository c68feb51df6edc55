#include "engine/draft.hpp"

#include <fstream>
#include <map>
#include <stdexcept>

#include "engine/gguf_model.hpp"

namespace anvil::engine {

using nlohmann::json;

const char* draft_kind_name(DraftKind kind) {
    switch (kind) {
        case DraftKind::None: return "none";
        case DraftKind::Self: return "self";
        case DraftKind::Model: return "model";
        case DraftKind::Layers: return "layers";
        case DraftKind::Ngram: return "ngram";
    }
    return "none";
}

void DraftOptions::validate(int target_layers) const {
    if (kind == DraftKind::None) return;
    if (tokens < 1 || tokens > kMaxDraftTokens)
        throw std::invalid_argument("--draft-tokens " + std::to_string(tokens) + ": expected 1 to " +
                                    std::to_string(kMaxDraftTokens));
    if (kind == DraftKind::Self && weights != WeightFormat::Q8 && weights != WeightFormat::BF16)
        throw std::invalid_argument("--draft-self: expected q8 or bf16 (a cheaper copy of the target's weights)");
    if (kind == DraftKind::Layers && (layers < 1 || layers >= target_layers))
        throw std::invalid_argument("--draft-layers " + std::to_string(layers) + ": expected 1 to " +
                                    std::to_string(target_layers - 1) + " (the model has " + std::to_string(target_layers) +
                                    " layers; the draft must be shorter than the target)");
    if (kind == DraftKind::Ngram && (ngram < 1 || ngram > 64))
        throw std::invalid_argument("--draft-ngram " + std::to_string(ngram) + ": expected 1 to 64 tokens");
}

json DraftOptions::describe() const {
    if (kind == DraftKind::None) return nullptr;
    json out = {{"kind", draft_kind_name(kind)}, {"tokens", tokens}};
    switch (kind) {
        case DraftKind::Self: out["weights"] = weight_format_name(weights); break;
        case DraftKind::Model:
            out["model"] = std::filesystem::absolute(model_dir).lexically_normal().filename().string();
            out["weights"] = weight_format_name(weights);
            break;
        case DraftKind::Layers: out["layers"] = layers; break;
        case DraftKind::Ngram: out["ngram"] = ngram; break;
        case DraftKind::None: break;
    }
    return out;
}

namespace {

json read_tokenizer(const std::filesystem::path& dir) {
    if (formats::is_model_file(dir)) return GgufModel(dir).tokenizer_documents().first;
    const auto path = dir / "tokenizer.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path.string() + ": cannot be read");
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        throw std::runtime_error(path.string() + ": not JSON: " + e.what());
    }
}

// The added tokens as id -> content: their order in the file does not matter.
std::map<long long, std::string> added_tokens(const json& tokenizer) {
    std::map<long long, std::string> out;
    if (const auto it = tokenizer.find("added_tokens"); it != tokenizer.end() && it->is_array())
        for (const auto& t : *it)
            if (t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                t["content"].is_string())
                out[t["id"].get<long long>()] = t["content"].get<std::string>();
    return out;
}

}  // namespace

void require_same_tokenizer(const std::filesystem::path& target_dir, const std::filesystem::path& draft_dir) {
    const json target = read_tokenizer(target_dir), draft = read_tokenizer(draft_dir);
    const auto fail = [&](const std::string& what) {
        throw std::runtime_error("--draft-model " + draft_dir.string() + ": its tokenizer is not the target's (" + what +
                                 "); a draft must share the target's vocabulary and merges");
    };
    const json none = json::object();
    const json& tm = target.contains("model") ? target["model"] : none;
    const json& dm = draft.contains("model") ? draft["model"] : none;
    const json tv = tm.value("vocab", json::object()), dv = dm.value("vocab", json::object());
    if (tv.size() != dv.size())
        fail("vocabulary of " + std::to_string(dv.size()) + " tokens, the target's has " + std::to_string(tv.size()));
    for (auto it = tv.begin(); it != tv.end(); ++it) {
        const auto other = dv.find(it.key());
        if (other == dv.end()) fail("token '" + it.key() + "' is missing");
        if (*other != it.value()) fail("token '" + it.key() + "' has id " + other->dump() + ", the target's " + it.value().dump());
    }
    const json tmerge = tm.value("merges", json::array()), dmerge = dm.value("merges", json::array());
    if (tmerge.size() != dmerge.size())
        fail(std::to_string(dmerge.size()) + " merges, the target has " + std::to_string(tmerge.size()));
    for (size_t i = 0; i < tmerge.size(); ++i)
        if (tmerge[i] != dmerge[i]) fail("merge " + std::to_string(i) + " is " + dmerge[i].dump() + ", the target's " + tmerge[i].dump());
    if (added_tokens(target) != added_tokens(draft)) fail("the added (special) tokens differ");
}

void propose_ngram(const std::vector<int32_t>& tokens, int n, int k, std::vector<int32_t>& out) {
    const int len = int(tokens.size());
    if (n < 1 || k < 1 || len <= n) return;
    const int32_t* suffix = tokens.data() + len - n;
    for (int start = len - n - 1; start >= 0; --start) {
        int matched = 0;
        while (matched < n && tokens[size_t(start + matched)] == suffix[matched]) ++matched;
        if (matched < n) continue;
        // What followed the match; when that runs into the sequence's end (a loop shorter than
        // k), the loop goes on: the continuation continues from the proposal itself.
        const size_t first = out.size();
        for (int j = 0; j < k; ++j) {
            const int at = start + n + j;
            out.push_back(at < len ? tokens[size_t(at)] : out[first + size_t(at - len)]);
        }
        return;
    }
}

}  // namespace anvil::engine
