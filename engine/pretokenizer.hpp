// The split that runs before BPE: the regular expressions of GPT-2, Llama-3 and Qwen2, written
// out as scanners over code points (the patterns are recognised by their exact text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace anvil::engine {

enum class SplitPattern {
    Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    Llama3,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    Qwen2,   // the Llama-3 pattern with \p{N} one digit at a time
};

extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

// The pattern whose text is `regex`; throws naming the pattern when it is none of the three.
SplitPattern split_pattern_from_regex(const std::string& regex);
const char* split_pattern_regex(SplitPattern pattern);

// The pieces of `text` in order; concatenated they give the text back.
std::vector<std::string_view> pretokenize(std::string_view text, SplitPattern pattern);

}  // namespace anvil::engine
