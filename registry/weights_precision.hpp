// How precisely a recipe serves its model's weights, as one typed value: what orders candidates for
// qualification (the most faithful first, so the first default is the natural control), read once
// when the recipe is parsed. The spellings are a table: an unknown one is a warning, never a guess.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::registry {

enum class WeightsPrecision {
    f32,         // f32, fp32, float32
    half,        // bf16, f16, fp16 and their long names; vLLM's auto (the checkpoint's, nearly always 16-bit)
    eight_bit,   // q8, q8_0, int8, fp8 and its kinds, w8a8, w8a16
    fewer_bits,  // 4- to 6-bit formats: GGUF K-quants, AWQ, GPTQ, bitsandbytes, fp4 kinds
    unknown,     // a spelling this table does not know (the recipe's check warns)
    unstated,    // nothing says: the model's own
};
std::string_view to_string(WeightsPrecision precision);

// One spelling as launch flags and model blocks write it, compared without case.
std::optional<WeightsPrecision> precision_of(std::string_view spelling);

// Where a launch states its weights: anvil-engine's --weights (the last one given; "stored" means
// as the file holds them, so the model block's dtype), vLLM's --quantization before its --dtype,
// llama.cpp's files by their model block's dtype. The spelling, or nothing.
std::optional<std::string> weights_spelling(const std::vector<std::string>& arguments, const std::optional<std::string>& model_dtype);

// The precision of a stated spelling (unknown when the table lacks it), unstated without one.
WeightsPrecision weights_precision(const std::optional<std::string>& spelling);

}  // namespace anvil::registry
