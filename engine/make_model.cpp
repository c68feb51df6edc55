#include "engine/make_model.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/bpe_trainer.hpp"
#include "engine/gguf_convert.hpp"
#include "engine/tokenizer.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::engine {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The text the test tokenizer learns its merges from: prose, digits, code and chat-like turns.
constexpr const char* kCorpus = R"(The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.
A model reads the prompt, computes the logits and samples the next token; then it does it again.
Hello world! Hello there, how are you today? I am fine, thank you. What is the weather like?
It is sunny and warm, with a light breeze from the west. Tomorrow it will rain in the morning.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 12 42 100 256 1024 2048 4096 3.14159 2.71828 1,000,000.
The server answers requests from many users at once, and each request gets its own sequence.
def forward(self, x):
    return self.norm(x + self.attention(x))
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
user: Write a short poem about the sea.
assistant: The sea is wide, the sea is deep; it sings the sailors off to sleep.
user: What is two plus two?
assistant: Two plus two is four.
Memory bandwidth limits how fast a large language model can decode on a processor.
They're here, we've seen it, you'll see, I'd say, it's true, we'll go, I'm sure, don't worry.
)";

struct Shape {
    int dim, hidden, layers, heads, kv_heads, head_dim, merges, max_position;
    bool tie;
};

Shape preset_shape(const std::string& preset, const std::string& arch) {
    Shape s;
    if (preset == "tiny") s = {64, 128, 2, 4, 2, 16, 64, 512, true};
    else if (preset == "small") s = {256, 704, 4, 8, 2, 32, 400, 4096, false};
    else if (preset == "bench") s = {1024, 2816, 12, 16, 4, 64, 400, 4096, false};
    // Llama 3 8B's layer shapes with 20 of its 32 layers: 8.7 GB as bf16, for GPU benchmarks.
    else if (preset == "large") s = {4096, 14336, 20, 32, 8, 128, 400, 8192, false};
    else throw std::runtime_error("--preset " + preset + ": expected tiny, small, bench or large");
    if (arch == "qwen3") s.head_dim *= 2;  // Qwen3 sets head_dim apart from hidden_size / heads
    return s;
}

uint64_t splitmix(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& name) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    return h;
}

uint16_t f32_to_f16(float value) {
    uint32_t x;
    std::memcpy(&x, &value, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t raw_exponent = (x >> 23) & 0xffu;
    uint32_t mantissa = x & 0x7fffffu;
    if (raw_exponent == 0xff) return uint16_t(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
    const int exponent = int(raw_exponent) - 127 + 15;
    if (exponent >= 31) return uint16_t(sign | 0x7c00u);
    if (exponent <= 0) {
        if (exponent < -10) return uint16_t(sign);
        mantissa |= 0x800000u;
        const int shift = 14 - exponent;
        uint32_t half = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
        return uint16_t(sign | half);
    }
    uint32_t half = sign | (uint32_t(exponent) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
    return uint16_t(half);
}

struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
};

// Uniform in [center - spread, center + spread], from a stream that depends only on seed and name.
Tensor random_tensor(uint64_t seed, const std::string& name, std::vector<int64_t> shape, float center, float spread) {
    Tensor t{std::move(shape), {}};
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    t.values.resize(size_t(n));
    // splitmix64 advances its state by a constant, so value i comes from state + i * constant: the
    // values are drawn in parallel, the same as one after the other (--preset large has 4.4e9).
    const uint64_t first = seed ^ name_hash(name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        uint64_t state = first + uint64_t(i) * 0x9E3779B97F4A7C15ull;
        const double unit = double(splitmix(state) >> 11) * (1.0 / 9007199254740992.0);
        t.values[size_t(i)] = center + spread * float(2.0 * unit - 1.0);
    }
    return t;
}

void write_json(const fs::path& file, const json& doc) {
    std::ofstream out(file, std::ios::binary);
    out << doc.dump(2) << "\n";
    if (!out) throw std::runtime_error(file.string() + ": cannot write");
}

std::string tensor_bytes(const Tensor& t, const std::string& dtype) {
    std::string bytes;
    if (dtype == "f32") {
        bytes.resize(t.values.size() * 4);
        std::memcpy(bytes.data(), t.values.data(), bytes.size());
    } else {
        bytes.resize(t.values.size() * 2);
        for (size_t i = 0; i < t.values.size(); ++i) {
            const uint16_t h = dtype == "bf16" ? kernels::f32_to_bf16(t.values[i]) : f32_to_f16(t.values[i]);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
    }
    return bytes;
}

size_t write_safetensors(const fs::path& file, const std::map<std::string, Tensor>& tensors,
                         const std::vector<std::string>& names, const std::string& dtype) {
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::vector<std::string> blobs;
    size_t offset = 0;
    const std::string dtype_text = dtype == "f32" ? "F32" : dtype == "bf16" ? "BF16" : "F16";
    for (const auto& name : names) {
        const Tensor& t = tensors.at(name);
        blobs.push_back(tensor_bytes(t, dtype));
        header[name] = {{"dtype", dtype_text}, {"shape", t.shape}, {"data_offsets", {offset, offset + blobs.back().size()}}};
        offset += blobs.back().size();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned in a mapping
    std::ofstream out(file, std::ios::binary);
    uint64_t length = text.size();
    char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = char((length >> (8 * i)) & 0xff);
    out.write(prefix, 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto& blob : blobs) out.write(blob.data(), std::streamsize(blob.size()));
    if (!out) throw std::runtime_error(file.string() + ": cannot write");
    return offset;
}

struct Family {
    std::vector<std::string> specials;
    std::string bos, eos, end_of_turn, chat_template;
    bool add_bos;
};

Family chat_family(const std::string& arch) {
    if (arch == "qwen2" || arch == "qwen3")
        return {{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
                "",
                "<|im_end|>",
                "<|im_end|>",
                "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                "{% endif %}",
                false};
    if (arch == "mistral")
        return {{"<unk>", "<s>", "</s>", "[INST]", "[/INST]"},
                "<s>",
                "</s>",
                "</s>",
                "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
                "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
                "eos_token }}{% endif %}{% endfor %}",
                true};
    return {{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|eot_id|>",
            "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
            "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if "
            "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
            false};
}

// The byte-level tokenizer: learned merges, then the chat family's special tokens. Returns the
// vocabulary's size.
int write_byte_level_tokenizer(const fs::path& out, const Shape& s, const std::string& arch) {
    const SplitPattern pattern = arch == "llama"     ? SplitPattern::Llama3
                                 : arch == "mistral" ? SplitPattern::Gpt2
                                                     : SplitPattern::Qwen2;
    const BpeVocabulary bpe = train_bpe(kCorpus, pattern, s.merges);
    const Family family = chat_family(arch);
    json vocab = json::object();
    for (size_t i = 0; i < bpe.tokens.size(); ++i) vocab[bpe.tokens[i]] = i;
    json merges = json::array();
    for (const auto& [a, b] : bpe.merges) merges.push_back(json::array({a, b}));
    json added = json::array();
    std::map<std::string, int> special_ids;
    for (const auto& special : family.specials) {
        const int id = int(bpe.tokens.size() + special_ids.size());
        special_ids[special] = id;
        added.push_back({{"id", id}, {"content", special}, {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    const int vocab_size = int(bpe.tokens.size() + family.specials.size());
    json pre_tokenizer;
    if (pattern == SplitPattern::Gpt2) {
        pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    } else {
        pre_tokenizer = {{"type", "Sequence"},
                         {"pretokenizers",
                          {{{"type", "Split"},
                            {"pattern", {{"Regex", split_pattern_regex(pattern)}}},
                            {"behavior", "Isolated"},
                            {"invert", false}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    }
    // Llama-3 adds its begin-of-text token through the post-processor; Mistral through add_bos_token.
    json post_processor = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
    if (arch == "llama") {
        const int bos = special_ids.at(family.bos);
        const json bos_item = {{"SpecialToken", {{"id", family.bos}, {"type_id", 0}}}};
        const json sequence_a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
        const json sequence_b = {{"Sequence", {{"id", "B"}, {"type_id", 1}}}};
        json templated = json::object();
        templated["type"] = "TemplateProcessing";
        templated["single"] = json::array({bos_item, sequence_a});
        templated["pair"] = json::array({bos_item, sequence_a, bos_item, sequence_b});
        templated["special_tokens"][family.bos] = {{"id", family.bos}, {"ids", json::array({bos})},
                                                   {"tokens", json::array({family.bos})}};
        json sequence = json::object();
        sequence["type"] = "Sequence";
        sequence["processors"] = json::array({post_processor, templated});
        post_processor = sequence;
    }
    json tokenizer = {{"version", "1.0"},
                      {"truncation", nullptr},
                      {"padding", nullptr},
                      {"added_tokens", added},
                      {"normalizer", arch == "qwen2" || arch == "qwen3" ? json{{"type", "NFC"}} : json()},
                      {"pre_tokenizer", pre_tokenizer},
                      {"post_processor", post_processor},
                      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
                      {"model",
                       {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", nullptr},
                        {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        {"ignore_merges", arch == "llama"},
                        {"vocab", vocab},
                        {"merges", merges}}}};
    write_json(out / "tokenizer.json", tokenizer);
    json tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                             {"bos_token", family.bos.empty() ? json() : json(family.bos)},
                             {"eos_token", family.eos},
                             {"add_bos_token", family.add_bos},
                             {"model_max_length", s.max_position},
                             {"chat_template", family.chat_template}};
    write_json(out / "tokenizer_config.json", tokenizer_config);

    return vocab_size;
}

// Mistral 7B's kind of tokenizer.json: <unk> <s> </s>, the byte tokens, the corpus's characters
// and the learned merges; Llama 2's Prepend/Replace normalizer, no pre-tokenizer, and the decoder
// that undoes them.
int write_sentencepiece_tokenizer(const fs::path& out, const Shape& s) {
    const BpeVocabulary bpe = train_sentencepiece_bpe(kCorpus, s.merges);
    const Family family = chat_family("mistral");
    const std::vector<std::string> specials = {"<unk>", "<s>", "</s>"};
    json vocab = json::object();
    json added = json::array();
    for (size_t i = 0; i < specials.size(); ++i) {
        vocab[specials[i]] = i;
        added.push_back({{"id", i}, {"content", specials[i]}, {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    for (size_t i = 0; i < bpe.tokens.size(); ++i) vocab[bpe.tokens[i]] = specials.size() + i;
    json merges = json::array();
    for (const auto& [a, b] : bpe.merges) merges.push_back(a + " " + b);
    const std::string meta(kMetaspace);
    json single = json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
    json pair = single;
    pair.push_back({{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}});
    pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    json special_tokens = json::object();
    special_tokens["<s>"] = {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}};
    json tokenizer = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer",
         {{"type", "Sequence"},
          {"normalizers",
           {{{"type", "Prepend"}, {"prepend", meta}}, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}}}}},
        {"pre_tokenizer", nullptr},
        {"post_processor", {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special_tokens}}},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders",
           {{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
            {{"type", "ByteFallback"}},
            {{"type", "Fuse"}},
            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", "<unk>"},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", true},
          {"byte_fallback", true},
          {"vocab", vocab},
          {"merges", merges}}}};
    write_json(out / "tokenizer.json", tokenizer);
    write_json(out / "tokenizer_config.json", {{"tokenizer_class", "LlamaTokenizer"},
                                               {"bos_token", "<s>"},
                                               {"eos_token", "</s>"},
                                               {"unk_token", "<unk>"},
                                               {"add_bos_token", true},
                                               {"add_eos_token", false},
                                               {"legacy", true},
                                               {"model_max_length", s.max_position},
                                               {"chat_template", family.chat_template}});
    return int(specials.size() + bpe.tokens.size());
}

}  // namespace

size_t make_model(const MakeModelOptions& o) {
    if (o.out.extension() == ".gguf") {
        // The Hugging Face directory first, beside the file, then the converter's GGUF of it.
        const GgufFileType type = parse_gguf_type(o.dtype);
        if (fs::exists(o.out)) throw std::runtime_error(o.out.string() + ": exists; choose a new --out file");
        if (o.shards != 1) throw std::runtime_error("--shards: a GGUF file is one file");
        MakeModelOptions hf = o;
        hf.out = o.out.string() + ".hf";
        hf.dtype = "f32";
        fs::remove_all(hf.out);
        make_model(hf);
        const size_t bytes = convert_to_gguf(hf.out, o.out, type);
        fs::remove_all(hf.out);
        return bytes;
    }
    const std::string& arch = o.arch;
    if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "mistral")
        throw std::runtime_error("--arch " + arch + ": expected llama, qwen2, qwen3 or mistral");
    if (o.dtype != "f32" && o.dtype != "bf16" && o.dtype != "f16")
        throw std::runtime_error("--dtype " + o.dtype + ": expected f32, bf16 or f16 (or q8_0, q4_0, q4_k_m or q6_k for a .gguf --out)");
    if (o.shards < 1 || o.shards > 99) throw std::runtime_error("--shards must be 1 to 99");
    Shape s = preset_shape(o.preset, arch);
    if (o.layers < 0 || o.layers > 64) throw std::runtime_error("--layers " + std::to_string(o.layers) + ": expected 1 to 64");
    if (o.layers > 0) s.layers = o.layers;
    std::error_code ec;
    if (fs::exists(o.out) && !fs::is_empty(o.out, ec))
        throw std::runtime_error(o.out.string() + ": exists and is not empty; choose a new --out directory");
    fs::create_directories(o.out);

    if (o.vocab != "byte-level" && o.vocab != "sentencepiece")
        throw std::runtime_error("--vocab " + o.vocab + ": expected byte-level or sentencepiece");
    if (o.vocab == "sentencepiece" && arch != "mistral")
        throw std::runtime_error("--vocab sentencepiece: Mistral's kind of vocabulary; use it with --arch mistral");
    const int vocab_size = o.vocab == "sentencepiece" ? write_sentencepiece_tokenizer(o.out, s)
                                                      : write_byte_level_tokenizer(o.out, s, arch);
    const Family family = chat_family(arch);
    const Tokenizer tokenizer = Tokenizer::load(o.out);
    std::vector<int> eos_ids = {*tokenizer.token_id(family.eos)};
    if (family.end_of_turn != family.eos) eos_ids.push_back(*tokenizer.token_id(family.end_of_turn));
    const json bos_id = family.bos.empty() ? json() : json(*tokenizer.token_id(family.bos));

    write_json(o.out / "generation_config.json",
               {{"bos_token_id", bos_id}, {"eos_token_id", eos_ids}, {"do_sample", false}});

    const std::string architecture = arch == "llama"   ? "LlamaForCausalLM"
                                     : arch == "qwen2" ? "Qwen2ForCausalLM"
                                     : arch == "qwen3" ? "Qwen3ForCausalLM"
                                                       : "MistralForCausalLM";
    json config = {{"architectures", {architecture}},
                   {"model_type", arch},
                   {"hidden_size", s.dim},
                   {"intermediate_size", s.hidden},
                   {"num_hidden_layers", s.layers},
                   {"num_attention_heads", s.heads},
                   {"num_key_value_heads", s.kv_heads},
                   {"vocab_size", vocab_size},
                   {"max_position_embeddings", s.max_position},
                   {"rms_norm_eps", 1e-5},
                   {"rope_theta", arch == "llama" ? 500000.0 : 10000.0},
                   {"hidden_act", "silu"},
                   {"tie_word_embeddings", s.tie},
                   {"bos_token_id", bos_id},
                   {"eos_token_id", eos_ids.front()},
                   {"torch_dtype", o.dtype == "f32" ? "float32" : o.dtype == "bf16" ? "bfloat16" : "float16"}};
    if (arch == "llama") {
        config["attention_bias"] = false;
        // A short original context so that the scaling changes some of the test model's frequencies.
        config["rope_scaling"] = {{"rope_type", "llama3"},
                                  {"factor", 8.0},
                                  {"low_freq_factor", 1.0},
                                  {"high_freq_factor", 4.0},
                                  {"original_max_position_embeddings", 256}};
    }
    if (arch == "qwen3") {
        config["head_dim"] = s.head_dim;
        config["attention_bias"] = false;
    }
    if (arch == "qwen2" || arch == "qwen3") config["use_sliding_window"] = false;
    if (arch == "mistral") config["sliding_window"] = 64;
    write_json(o.out / "config.json", config);

    // Weights. Scales keep activations near unit size through the layers and give the logits a
    // spread wide enough that the top token is clear.
    const int q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
    std::map<std::string, Tensor> tensors;
    auto matrix = [&](const std::string& name, int rows, int cols, float gain) {
        tensors[name] = random_tensor(o.seed, name, {rows, cols}, 0.0f, gain * std::sqrt(3.0f / float(cols)));
    };
    auto vector = [&](const std::string& name, int n, float center, float spread) {
        tensors[name] = random_tensor(o.seed, name, {n}, center, spread);
    };
    // A tied embedding is also the output head: kept small so that the token's own embedding,
    // still in the residual stream, does not make every model repeat its last token.
    tensors["model.embed_tokens.weight"] =
        random_tensor(o.seed, "model.embed_tokens.weight", {vocab_size, s.dim}, 0.0f, s.tie ? 0.3f : 1.0f);
    if (o.early_exit < 0 || o.early_exit >= s.layers)
        throw std::runtime_error("--early-exit " + std::to_string(o.early_exit) + ": expected 0 (off) to " +
                                 std::to_string(s.layers - 1) + " (the model has " +
                                 std::to_string(s.layers) + " layers)");
    // How much a layer past the early exit may still change: at 1/128 of a full layer's output the
    // example model's exit after its first of 8 layers agrees with the whole model on ~97% of its
    // greedy tokens; at 1/64 on ~94%, at 1/10 on ~57% (measured on the qualification's prompts).
    constexpr float kCorrection = 1.0f / 128;
    for (int l = 0; l < s.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const float out_gain = o.early_exit > 0 && l >= o.early_exit ? kCorrection : 1.0f;
        vector(p + "input_layernorm.weight", s.dim, 1.0f, 0.2f);
        vector(p + "post_attention_layernorm.weight", s.dim, 1.0f, 0.2f);
        matrix(p + "self_attn.q_proj.weight", q_dim, s.dim, 2.0f);
        matrix(p + "self_attn.k_proj.weight", kv_dim, s.dim, 2.0f);
        matrix(p + "self_attn.v_proj.weight", kv_dim, s.dim, 1.0f);
        matrix(p + "self_attn.o_proj.weight", s.dim, q_dim, 1.5f * out_gain);
        if (arch == "qwen2") {
            vector(p + "self_attn.q_proj.bias", q_dim, 0.0f, 0.5f);
            vector(p + "self_attn.k_proj.bias", kv_dim, 0.0f, 0.5f);
            vector(p + "self_attn.v_proj.bias", kv_dim, 0.0f, 0.5f);
        }
        if (arch == "qwen3") {
            vector(p + "self_attn.q_norm.weight", s.head_dim, 1.0f, 0.3f);
            vector(p + "self_attn.k_norm.weight", s.head_dim, 1.0f, 0.3f);
        }
        matrix(p + "mlp.gate_proj.weight", s.hidden, s.dim, 1.0f);
        matrix(p + "mlp.up_proj.weight", s.hidden, s.dim, 1.0f);
        matrix(p + "mlp.down_proj.weight", s.dim, s.hidden, 1.5f * out_gain);
    }
    vector("model.norm.weight", s.dim, 1.0f, 0.2f);
    if (!s.tie) matrix("lm_head.weight", vocab_size, s.dim, 3.0f);

    std::vector<std::string> names;
    size_t total = 0;
    for (const auto& [name, t] : tensors) {
        names.push_back(name);
        total += t.values.size() * (o.dtype == "f32" ? 4 : 2);
    }
    if (o.shards == 1) {
        write_safetensors(o.out / "model.safetensors", tensors, names, o.dtype);
    } else {
        json weight_map = json::object();
        const size_t per_shard = (total + o.shards - 1) / size_t(o.shards);
        size_t index = 0;
        for (int shard = 0; shard < o.shards; ++shard) {
            char file[64];
            std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", shard + 1, o.shards);
            std::vector<std::string> part;
            size_t bytes = 0;
            while (index < names.size() && (bytes < per_shard || shard == o.shards - 1)) {
                bytes += tensors[names[index]].values.size() * (o.dtype == "f32" ? 4 : 2);
                weight_map[names[index]] = file;
                part.push_back(names[index++]);
            }
            write_safetensors(o.out / file, tensors, part, o.dtype);
        }
        write_json(o.out / "model.safetensors.index.json", {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
    }
    return total;
}

}  // namespace anvil::engine
