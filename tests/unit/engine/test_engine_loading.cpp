// Loading a model directory: safetensors validation, tensor lookup by name, dtype and shape, the
// sharded index, and config.json problems, each refused with a message that names the culprit.
#include <catch2/catch.hpp>

#include <functional>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "engine/make_model.hpp"
#include "engine/safetensors.hpp"
#include "engine/weights.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;
using anvil::test::TempDir;

namespace {

// A safetensors image from a header and a data area.
std::string image(const json& header, const std::string& data, size_t pad_to = 8) {
    std::string text = header.dump();
    text.append((pad_to - text.size() % pad_to) % pad_to, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
    return out + text + data;
}

std::vector<TensorInfo> parse(const std::string& bytes) {
    return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "t.safetensors");
}

}  // namespace

TEST_CASE("a well-formed safetensors image parses with every tensor's place and shape", "[engine]") {
    const std::string data(4 * 6 + 2 * 3, 'x');
    const auto tensors = parse(image({{"__metadata__", {{"format", "pt"}}},
                                      {"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
                                      {"b", {{"dtype", "BF16"}, {"shape", {3}}, {"data_offsets", {24, 30}}}}},
                                     data));
    REQUIRE(tensors.size() == 2);
    CHECK(tensors[0].name == "a");
    CHECK(tensors[0].shape == std::vector<int64_t>{2, 3});
    CHECK(tensors[0].bytes == 24);
    CHECK(tensors[1].dtype == Dtype::BF16);
    CHECK(tensors[1].elements() == 3);
}

TEST_CASE("malformed safetensors headers are refused with the reason", "[engine]") {
    const std::string data(24, 'x');
    auto with = [&](const json& entry) { return image({{"a", entry}}, data); };
    CHECK_THROWS_WITH(parse("abc"), Catch::Contains("shorter than the 8-byte header"));
    std::string huge(16, '\0');
    huge[0] = char(0xff);
    huge[3] = char(0x7f);
    CHECK_THROWS_WITH(parse(huge), Catch::Contains("runs past the end"));
    CHECK_THROWS_WITH(parse(image(json::array({1, 2}), data)), Catch::Contains("not a JSON object"));
    CHECK_THROWS_WITH(parse(std::string("\x04\0\0\0\0\0\0\0{bad", 12)), Catch::Contains("not JSON"));
    CHECK_THROWS_WITH(parse(with({{"dtype", "F32"}, {"shape", {2, 3}}})), Catch::Contains("data_offsets"));
    CHECK_THROWS_WITH(parse(with({{"dtype", "Q4"}, {"shape", {6}}, {"data_offsets", {0, 24}}})),
                      Catch::Contains("unknown dtype Q4"));
    CHECK_THROWS_WITH(parse(with({{"dtype", "F32"}, {"shape", {2, 4}}, {"data_offsets", {0, 24}}})),
                      Catch::Contains("holds 24 bytes but its shape [2, 4] of F32 needs 32"));
    CHECK_THROWS_WITH(parse(with({{"dtype", "F32"}, {"shape", {8}}, {"data_offsets", {0, 32}}})),
                      Catch::Contains("outside the 24-byte data area"));
    CHECK_THROWS_WITH(parse(with({{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 4}}})),
                      Catch::Contains("not a size"));
    CHECK_THROWS_WITH(parse(with({{"dtype", "F32"}, {"shape", {uint64_t(1) << 40, uint64_t(1) << 40}}, {"data_offsets", {0, 4}}})),
                      Catch::Contains("impossibly large"));
    CHECK_THROWS_WITH(parse(image({{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                                   {"b", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}}}},
                                  data)),
                      Catch::Contains("overlap"));
}

TEST_CASE("tensors are fetched by name with shape and dtype checked against config.json", "[engine]") {
    TempDir dir;
    make_model({dir / "m", "tiny", "llama", "f32", 1, 1});
    TensorStore store(dir / "m");
    CHECK(store.get("model.norm.weight", {64}).dtype == Dtype::F32);
    CHECK_THROWS_WITH(store.get("model.norm.weight", {65}),
                      Catch::Contains("model.norm.weight has shape [64], expected [65]"));
    CHECK_THROWS_WITH(store.get("model.layers.9.mlp.up_proj.weight", {128, 64}), Catch::Contains("is missing"));

    // A config that disagrees with the weights fails at load, naming the tensor.
    json config = json::parse(anvil::test::read_file(dir / "m" / "config.json"));
    config["intermediate_size"] = 96;
    anvil::test::write_file(dir / "m" / "config.json", config.dump());
    const ModelConfig wrong = load_config(dir / "m");
    CHECK_THROWS_WITH(ModelWeights(wrong, dir / "m", WeightFormat::F32),
                      Catch::Contains("gate_proj.weight has shape [128, 64], expected [96, 64]"));
}

TEST_CASE("a sharded index must point at the shard that holds each tensor", "[engine]") {
    TempDir dir;
    make_model({dir / "m", "tiny", "llama", "f32", 1, 2});
    CHECK_NOTHROW(TensorStore(dir / "m"));
    json index = json::parse(anvil::test::read_file(dir / "m" / "model.safetensors.index.json"));
    const std::string moved = index["weight_map"]["model.norm.weight"] == "model-00001-of-00002.safetensors"
                                  ? "model-00002-of-00002.safetensors"
                                  : "model-00001-of-00002.safetensors";
    index["weight_map"]["model.norm.weight"] = moved;
    anvil::test::write_file(dir / "m" / "model.safetensors.index.json", index.dump());
    CHECK_THROWS_WITH(TensorStore(dir / "m"), Catch::Contains("puts model.norm.weight in " + moved));
    index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
    anvil::test::write_file(dir / "m" / "model.safetensors.index.json", index.dump());
    CHECK_THROWS_WITH(TensorStore(dir / "m"), Catch::Contains("outside the directory"));
    TempDir empty;
    CHECK_THROWS_WITH(TensorStore(empty.path()), Catch::Contains("no safetensors weights"));
}

TEST_CASE("config.json problems name the field and what is accepted", "[engine]") {
    TempDir dir;
    make_model({dir / "m", "tiny", "llama", "f32", 1, 1});
    const json good = json::parse(anvil::test::read_file(dir / "m" / "config.json"));
    auto refused = [&](const std::function<void(json&)>& change) {
        json c = good;
        change(c);
        anvil::test::write_file(dir / "m" / "config.json", c.dump());
        try {
            load_config(dir / "m");
        } catch (const std::runtime_error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    CHECK_THAT(refused([](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; }),
               Catch::Contains("GPT2LMHeadModel") && Catch::Contains("Qwen2ForCausalLM"));
    CHECK_THAT(refused([](json& c) { c.erase("hidden_size"); }), Catch::Contains("hidden_size is missing"));
    CHECK_THAT(refused([](json& c) { c["num_key_value_heads"] = 3; }), Catch::Contains("must divide num_attention_heads"));
    CHECK_THAT(refused([](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }),
               Catch::Contains("\"yarn\" is not supported"));
    CHECK_THAT(refused([](json& c) { c["hidden_act"] = "gelu"; }), Catch::Contains("hidden_act must be \"silu\""));
    anvil::test::write_file(dir / "m" / "config.json", good.dump());
    const ModelConfig c = load_config(dir / "m");
    CHECK(c.arch == Architecture::Llama);
    CHECK(c.rope_scaling.kind == RopeScaling::Kind::Llama3);
    CHECK(c.tie_embeddings);
    CHECK(c.eos_token_ids.size() == 2);  // generation_config.json's list wins over config.json's one id
}
