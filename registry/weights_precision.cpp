#include "registry/weights_precision.hpp"

#include <array>
#include <utility>

#include "registry/recipe.hpp"
#include "support/text.hpp"

namespace anvil::registry {

namespace {

constexpr std::array<std::pair<std::string_view, WeightsPrecision>, 41> kSpellings{{
    {"f32", WeightsPrecision::f32},           {"fp32", WeightsPrecision::f32},
    {"float32", WeightsPrecision::f32},       {"float", WeightsPrecision::f32},
    {"bf16", WeightsPrecision::half},         {"bfloat16", WeightsPrecision::half},
    {"f16", WeightsPrecision::half},          {"fp16", WeightsPrecision::half},
    {"float16", WeightsPrecision::half},      {"half", WeightsPrecision::half},
    {"auto", WeightsPrecision::half},
    {"q8", WeightsPrecision::eight_bit},      {"q8_0", WeightsPrecision::eight_bit},
    {"int8", WeightsPrecision::eight_bit},    {"fp8", WeightsPrecision::eight_bit},
    {"fp8_e4m3", WeightsPrecision::eight_bit}, {"fp8_e5m2", WeightsPrecision::eight_bit},
    {"w8a8", WeightsPrecision::eight_bit},    {"w8a16", WeightsPrecision::eight_bit},
    {"experts_int8", WeightsPrecision::eight_bit}, {"fbgemm_fp8", WeightsPrecision::eight_bit},
    {"tpu_int8", WeightsPrecision::eight_bit},    {"float8_e4m3fn", WeightsPrecision::eight_bit},
    {"float8_e5m2", WeightsPrecision::eight_bit}, {"int8_w8a8", WeightsPrecision::eight_bit},
    {"q4_0", WeightsPrecision::fewer_bits},   {"q4_1", WeightsPrecision::fewer_bits},
    {"q4_k", WeightsPrecision::fewer_bits},   {"q4_k_m", WeightsPrecision::fewer_bits},
    {"q4_k_s", WeightsPrecision::fewer_bits}, {"q5_k_m", WeightsPrecision::fewer_bits},
    {"q6_k", WeightsPrecision::fewer_bits},   {"awq", WeightsPrecision::fewer_bits},
    {"awq_marlin", WeightsPrecision::fewer_bits}, {"gptq", WeightsPrecision::fewer_bits},
    {"gptq_marlin", WeightsPrecision::fewer_bits}, {"bitsandbytes", WeightsPrecision::fewer_bits},
    {"nf4", WeightsPrecision::fewer_bits},    {"int4", WeightsPrecision::fewer_bits},
    {"mxfp4", WeightsPrecision::fewer_bits},  {"nvfp4", WeightsPrecision::fewer_bits},
}};

}  // namespace

std::string_view to_string(WeightsPrecision precision) {
    switch (precision) {
        case WeightsPrecision::f32: return "f32";
        case WeightsPrecision::half: return "16-bit";
        case WeightsPrecision::eight_bit: return "8-bit";
        case WeightsPrecision::fewer_bits: return "fewer than 8 bits";
        case WeightsPrecision::unknown: return "unknown";
        case WeightsPrecision::unstated: return "unstated";
    }
    return "?";
}

std::optional<WeightsPrecision> precision_of(std::string_view spelling) {
    const std::string lower = support::ascii_lower(spelling);
    for (const auto& [name, precision] : kSpellings)
        if (name == lower) return precision;
    return std::nullopt;
}

std::optional<std::string> weights_spelling(const std::vector<std::string>& arguments, const std::optional<std::string>& model_dtype) {
    if (auto w = last_flag_value(arguments, "--weights"); w && *w != "stored") return w;
    if (auto q = last_flag_value(arguments, "--quantization")) return q;
    if (auto d = last_flag_value(arguments, "--dtype")) return d;
    if (model_dtype && !model_dtype->empty()) return model_dtype;
    return std::nullopt;
}

WeightsPrecision weights_precision(const std::optional<std::string>& spelling) {
    if (!spelling) return WeightsPrecision::unstated;
    return precision_of(*spelling).value_or(WeightsPrecision::unknown);
}

}  // namespace anvil::registry
