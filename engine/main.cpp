// anvil-engine: the embedded inference engine. `serve` runs the OpenAI-compatible server;
// `make-model` writes the deterministic test models.
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "engine/gguf_convert.hpp"
#include "engine/make_model.hpp"
#include "engine/runner.hpp"
#include "engine/serve_command.hpp"
#include "engine/tokenizer.hpp"
#include "kernels/thread_policy.hpp"

namespace {

constexpr const char* kUsage = R"(usage: anvil-engine <command> [options]

commands:
  serve --model DIR|FILE.gguf [--host 127.0.0.1] [--port 8000] [--served-model-name NAME]
        [--max-context N] [--max-seqs N] [--threads N] [--weights f32|bf16|q8|stored]
        [--kv-dtype f32|bf16] [--seed N] [--kv-blocks N] [--max-batch-tokens N] [--api-key KEY]
        [--prefix-caching on|off] [--device cpu|cuda:N] [--gpu-memory-utilization F]
        [--draft-self q8|bf16 | --draft-model DIR [--draft-weights f32|bf16|q8] | --draft-layers N |
         --draft-ngram N] [--draft-tokens K]
      load a Hugging Face model directory or a GGUF file and serve the OpenAI API (/v1/completions,
      /v1/chat/completions, /v1/models, /tokenize, /health, /metrics); --port 0 picks a free port;
      --max-context defaults to the model's own context length (no more than the KV cache,
      4 GiB or --kv-blocks, holds for one sequence);
      --device cuda:N runs the model on GPU N (a build with the CUDA toolkit; f32, bf16 and q8
      weights), its KV cache sized to what F (default 0.9) of the GPU's memory leaves once the
      weights are up (or --kv-blocks), and --max-context defaulting to the model's own;
      with --api-key (or ANVIL_ENGINE_API_KEY, which ps does not show) every request but /health
      and /metrics needs 'Authorization: Bearer KEY'; bodies over what --max-context can hold get 413;
      prompts that start alike share the KV blocks of what they share (prefix caching, on by
      default); a draft makes decoding speculative (lossless: the output is the target's): the target's own
      weights quantized, a second model with the same tokenizer, the target's first N layers
      (early exit), or prompt lookup of the last N tokens; K (1-16, default 4) tokens a step
  make-model --out DIR|FILE.gguf [--preset tiny|small|bench|large] [--seed N] [--arch llama|qwen2|qwen3|mistral]
             [--dtype f32|bf16|f16|q8_0|q4_0|q4_k_m|q6_k] [--vocab byte-level|sentencepiece]
             [--shards N] [--early-exit N] [--layers N]
      write a deterministic model directory with random weights and a BPE tokenizer, byte-level
      or (--vocab sentencepiece, with --arch mistral) Mistral 7B's SentencePiece kind
      (or, for FILE.gguf, that model as one GGUF file: --dtype f32, f16, bf16, q8_0, q4_0, q4_k_m or q6_k);
      --early-exit N: the layers past the first N only make small corrections, as in a model
      trained for early exit, so that --draft-layers N predicts most of its tokens; --layers N
      overrides the preset's depth (the first N layers of the same model: a --draft-model for it)
  convert --model DIR --out FILE.gguf [--type f32|f16|bf16|q8_0|q4_0|q4_k_m|q6_k | --vocab-only on]
      write a Hugging Face model directory as a GGUF file, as llama.cpp's convert_hf_to_gguf.py
      does for the architectures anvil-engine runs (norms and biases stay f32), quantized as
      llama-quantize mixes its types for q4_0, q4_k_m and q6_k; --vocab-only on writes the
      tokenizer alone (DIR needs only tokenizer.json), as llama.cpp's vocab-only files
  tokenize --model DIR|FILE.gguf [--special on|off] [--text TEXT]
      print TEXT's token ids as a JSON array, or, without --text, those of each standard input
      line (one JSON string each) one array per line; --special on adds the begin and end tokens
      the tokenizer asks for (added tokens written in the text are always matched, as /tokenize does)

environment: ANVIL_LOG=debug|info|warn|error (default info), ANVIL_KERNELS=reference|avx2|avx512|...,
  OMP_NUM_THREADS (without --threads), OMP_WAIT_POLICY (default passive; active spins between regions,
  faster only on idle cores), GOMP_SPINCOUNT; these are the variables anvild lets a recipe set
)";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::map<std::string, std::string> parse_flags(const std::vector<std::string>& words, const std::set<std::string>& known) {
    std::map<std::string, std::string> flags;
    for (size_t i = 0; i < words.size(); ++i) {
        std::string word = words[i], value;
        if (!word.starts_with("--")) throw UsageError("unexpected argument '" + word + "'");
        if (auto eq = word.find('='); eq != std::string::npos) {
            value = word.substr(eq + 1);
            word = word.substr(0, eq);
        } else {
            if (i + 1 >= words.size()) throw UsageError(word + " needs a value");
            value = words[++i];
        }
        if (!known.count(word)) throw UsageError("unknown option " + word);
        // A flag given twice is refused rather than one value silently winning: a launcher that
        // appends its own --model or --port must not be overridden by what it was handed.
        if (!flags.emplace(word, value).second) throw UsageError(word + " is given twice; give it once");
    }
    return flags;
}

long number(const std::map<std::string, std::string>& flags, const std::string& flag, long fallback) {
    auto it = flags.find(flag);
    if (it == flags.end()) return fallback;
    char* end = nullptr;
    const long v = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || v < 0) throw UsageError(flag + " " + it->second + ": expected a non-negative integer");
    return v;
}

double fraction(const std::map<std::string, std::string>& flags, const std::string& flag, double fallback) {
    auto it = flags.find(flag);
    if (it == flags.end()) return fallback;
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !(v > 0.0 && v <= 1.0))
        throw UsageError(flag + " " + it->second + ": expected a fraction above 0 and at most 1 (0.9 is 90%)");
    return v;
}

std::string text(const std::map<std::string, std::string>& flags, const std::string& flag, const std::string& fallback) {
    auto it = flags.find(flag);
    return it == flags.end() ? fallback : it->second;
}

int convert_command(const std::vector<std::string>& words) {
    const auto flags = parse_flags(words, {"--model", "--out", "--type", "--vocab-only"});
    if (!flags.count("--model") || !flags.count("--out")) throw UsageError("convert needs --model DIR and --out FILE.gguf");
    const std::string vocab_only = text(flags, "--vocab-only", "off");
    if (vocab_only != "on" && vocab_only != "off") throw UsageError("--vocab-only " + vocab_only + ": expected on or off");
    if (vocab_only == "on") {
        if (flags.count("--type")) throw UsageError("--type: a --vocab-only file holds no matrices");
        const size_t bytes = anvil::engine::convert_vocabulary_to_gguf(flags.at("--model"), flags.at("--out"));
        std::cout << "wrote " << flags.at("--out") << ": " << bytes << " bytes, the vocabulary alone\n";
        return 0;
    }
    const std::string type = text(flags, "--type", "f32");
    const size_t bytes = anvil::engine::convert_to_gguf(flags.at("--model"), flags.at("--out"), anvil::engine::parse_gguf_type(type));
    std::cout << "wrote " << flags.at("--out") << ": " << bytes << " bytes, matrices " << type << "\n";
    return 0;
}

int tokenize_command(const std::vector<std::string>& words) {
    const auto flags = parse_flags(words, {"--model", "--special", "--text"});
    if (!flags.count("--model")) throw UsageError("tokenize needs --model DIR|FILE.gguf");
    const std::string special = text(flags, "--special", "off");
    if (special != "on" && special != "off") throw UsageError("--special " + special + ": expected on or off");
    const auto tokenizer = anvil::engine::Tokenizer::load(flags.at("--model"));
    auto ids = [&](const std::string& line) { return nlohmann::json(tokenizer.encode(line, special == "on")).dump(); };
    if (flags.count("--text")) {
        std::cout << ids(flags.at("--text")) << "\n";
        return 0;
    }
    std::string line;
    for (size_t number = 1; std::getline(std::cin, line); ++number) {
        const auto value = nlohmann::json::parse(line, nullptr, false);
        if (!value.is_string()) throw std::runtime_error("standard input line " + std::to_string(number) + " is not a JSON string");
        std::cout << ids(value.get<std::string>()) << "\n";
    }
    return 0;
}

int make_model_command(const std::vector<std::string>& words) {
    const auto flags = parse_flags(words, {"--out", "--preset", "--seed", "--arch", "--dtype", "--vocab", "--shards", "--early-exit", "--layers"});
    anvil::engine::MakeModelOptions o;
    if (!flags.count("--out")) throw UsageError("make-model needs --out DIR");
    o.out = flags.at("--out");
    o.preset = text(flags, "--preset", "tiny");
    o.arch = text(flags, "--arch", "llama");
    o.dtype = text(flags, "--dtype", "f32");
    o.vocab = text(flags, "--vocab", o.vocab);
    o.seed = uint64_t(number(flags, "--seed", 1));
    o.shards = int(number(flags, "--shards", 1));
    o.early_exit = int(number(flags, "--early-exit", 0));
    o.layers = int(number(flags, "--layers", 0));
    const size_t bytes = anvil::engine::make_model(o);
    // A GGUF file's size counts its metadata and vocabulary too; a directory's, its weights alone.
    std::cout << "wrote " << o.out.string() << ": " << o.preset << " " << o.arch << " model, " << bytes
              << " bytes of " << (o.out.extension() == ".gguf" ? "GGUF file, " : "") << o.dtype << " weights\n";
    return 0;
}

int serve_command(const std::vector<std::string>& words) {
    const auto flags = parse_flags(words, {"--model", "--host", "--port", "--served-model-name", "--max-context",
                                           "--max-seqs", "--threads", "--weights", "--kv-dtype", "--seed",
                                           "--kv-blocks", "--max-batch-tokens", "--api-key", "--draft-self", "--draft-model",
                                           "--draft-weights", "--draft-layers", "--draft-ngram", "--draft-tokens",
                                           "--prefix-caching", "--device", "--gpu-memory-utilization"});
    anvil::engine::ServeOptions o;
    if (!flags.count("--model")) throw UsageError("serve needs --model DIR");
    o.model_dir = flags.at("--model");
    o.host = text(flags, "--host", o.host);
    o.port = int(number(flags, "--port", o.port));
    o.served_model_name = text(flags, "--served-model-name", "");
    o.max_context = int(number(flags, "--max-context", 0));
    if (flags.count("--max-context") && o.max_context < 2) throw UsageError("--max-context: expected at least 2");
    o.max_seqs = int(number(flags, "--max-seqs", o.max_seqs));
    o.threads = int(number(flags, "--threads", 0));
    o.weights = text(flags, "--weights", o.weights);
    o.kv_dtype = text(flags, "--kv-dtype", o.kv_dtype);
    o.seed = uint64_t(number(flags, "--seed", long(o.seed)));
    o.kv_blocks = int(number(flags, "--kv-blocks", 0));
    o.max_batch_tokens = int(number(flags, "--max-batch-tokens", o.max_batch_tokens));
    const std::string caching = text(flags, "--prefix-caching", "on");
    if (caching != "on" && caching != "off") throw UsageError("--prefix-caching " + caching + ": expected on or off");
    o.prefix_caching = caching == "on";
    o.gpu_memory_utilization = fraction(flags, "--gpu-memory-utilization", o.gpu_memory_utilization);
    o.device = text(flags, "--device", o.device);
    try {
        anvil::engine::check_device_name(o.device);
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--device: ") + e.what());
    }
    if (flags.count("--gpu-memory-utilization") && o.device == "cpu")
        throw UsageError("--gpu-memory-utilization applies to --device cuda:N only");
    const char* key = std::getenv("ANVIL_ENGINE_API_KEY");
    o.api_key = text(flags, "--api-key", key ? key : "");
    o.draft_self = text(flags, "--draft-self", "");
    o.draft_model = text(flags, "--draft-model", "");
    o.draft_weights = text(flags, "--draft-weights", "");
    o.draft_layers = int(number(flags, "--draft-layers", 0));
    o.draft_ngram = int(number(flags, "--draft-ngram", 0));
    o.draft_tokens = int(number(flags, "--draft-tokens", 4));
    if (flags.count("--draft-layers") && o.draft_layers == 0) throw UsageError("--draft-layers 0: expected at least 1");
    if (flags.count("--draft-ngram") && o.draft_ngram == 0) throw UsageError("--draft-ngram 0: expected at least 1");
    try {
        (void)anvil::engine::draft_options(o);
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
    return anvil::engine::serve(o);
}

}  // namespace

int main(int argc, char** argv) {
    anvil::kernels::prefer_passive_openmp_waiting(argv);
    auto logger = spdlog::stderr_color_mt("anvil-engine");
    spdlog::set_default_logger(logger);
    const char* level = std::getenv("ANVIL_LOG");
    spdlog::set_level(level && *level ? spdlog::level::from_str(level) : spdlog::level::info);

    std::vector<std::string> words(argv + 1, argv + argc);
    if (words.empty() || words[0] == "--help" || words[0] == "-h" || words[0] == "help") {
        std::cout << kUsage;
        return words.empty() ? 2 : 0;
    }
    const std::string command = words[0];
    std::vector<std::string> rest(words.begin() + 1, words.end());
    try {
        if (command == "make-model") return make_model_command(rest);
        if (command == "convert") return convert_command(rest);
        if (command == "serve") return serve_command(rest);
        if (command == "tokenize") return tokenize_command(rest);
        std::cerr << "anvil-engine: unknown command '" << command << "'\n" << kUsage;
        return 2;
    } catch (const UsageError& e) {
        std::cerr << "anvil-engine " << command << ": " << e.what() << " (see anvil-engine --help)\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "anvil-engine " << command << ": " << e.what() << "\n";
        return 1;
    }
}
