#include "engine/pretokenizer.hpp"

#include <stdexcept>

#include "engine/unicode.hpp"

namespace anvil::engine {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

SplitPattern split_pattern_from_regex(const std::string& regex) {
    if (regex == kGpt2Pattern) return SplitPattern::Gpt2;
    if (regex == kLlama3Pattern) return SplitPattern::Llama3;
    if (regex == kQwen2Pattern) return SplitPattern::Qwen2;
    throw std::runtime_error("pre-tokenizer pattern " + regex +
                             " is not one anvil-engine knows (it knows the GPT-2, Llama-3 and Qwen2 patterns)");
}

const char* split_pattern_regex(SplitPattern pattern) {
    switch (pattern) {
        case SplitPattern::Gpt2: return kGpt2Pattern;
        case SplitPattern::Llama3: return kLlama3Pattern;
        case SplitPattern::Qwen2: return kQwen2Pattern;
    }
    return "";
}

namespace {

uint32_t lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// Length in code points of the contraction at i ('s 't 're 've 'm 'll 'd), or 0.
size_t contraction(const std::vector<Codepoint>& cps, size_t i, bool ignore_case) {
    if (cps[i].value != '\'' || i + 1 >= cps.size()) return 0;
    auto at = [&](size_t k) -> uint32_t {
        if (k >= cps.size()) return 0;
        return ignore_case ? lower_ascii(cps[k].value) : cps[k].value;
    };
    const uint32_t a = at(i + 1), b = at(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

bool is_newline(uint32_t c) { return c == '\r' || c == '\n'; }

// \s+(?!\S) then \s+, from i which is white space: the run, less its last character when a
// non-space follows and the run is longer than one.
size_t whitespace_run(const std::vector<Codepoint>& cps, size_t i) {
    size_t j = i;
    while (j < cps.size() && is_whitespace(cps[j].value)) ++j;
    if (j < cps.size() && j - i > 1) --j;
    return j - i;
}

size_t match_gpt2(const std::vector<Codepoint>& cps, size_t i) {
    const size_t n = cps.size();
    if (size_t c = contraction(cps, i, false)) return c;
    const size_t start = cps[i].value == ' ' && i + 1 < n ? i + 1 : i;
    const uint32_t first = cps[start].value;
    auto run = [&](auto predicate) {
        size_t j = start;
        while (j < n && predicate(cps[j].value)) ++j;
        return j - i;
    };
    if (is_letter(first)) return run(is_letter);
    if (is_number(first)) return run(is_number);
    auto other = [](uint32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); };
    if (other(first)) return run(other);
    return whitespace_run(cps, i);
}

size_t match_llama3(const std::vector<Codepoint>& cps, size_t i, size_t max_digits) {
    const size_t n = cps.size();
    if (size_t c = contraction(cps, i, true)) return c;
    const uint32_t c0 = cps[i].value;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is_letter(c0) || (!is_newline(c0) && !is_number(c0) && i + 1 < n && is_letter(cps[i + 1].value))) {
        size_t j = i + 1;
        while (j < n && is_letter(cps[j].value)) ++j;
        return j - i;
    }
    // \p{N}{1,max}
    if (is_number(c0)) {
        size_t j = i;
        while (j < n && j - i < max_digits && is_number(cps[j].value)) ++j;
        return j - i;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    auto other = [](uint32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); };
    const size_t start = c0 == ' ' && i + 1 < n && other(cps[i + 1].value) ? i + 1 : i;
    if (other(cps[start].value)) {
        size_t j = start;
        while (j < n && other(cps[j].value)) ++j;
        while (j < n && is_newline(cps[j].value)) ++j;
        return j - i;
    }
    // \s*[\r\n]+: up to and including the last line break of the white-space run.
    size_t end = i;
    while (end < n && is_whitespace(cps[end].value)) ++end;
    for (size_t k = end; k > i; --k)
        if (is_newline(cps[k - 1].value)) return k - i;
    return whitespace_run(cps, i);
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text, SplitPattern pattern) {
    const auto cps = decode_utf8(text);
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i < cps.size();) {
        size_t length = pattern == SplitPattern::Gpt2     ? match_gpt2(cps, i)
                        : pattern == SplitPattern::Llama3 ? match_llama3(cps, i, 3)
                                                          : match_llama3(cps, i, 1);
        if (length == 0) length = 1;
        const size_t end = i + length;
        const size_t byte_begin = cps[i].offset;
        const size_t byte_end = end < cps.size() ? cps[end].offset : text.size();
        pieces.push_back(text.substr(byte_begin, byte_end - byte_begin));
        i = end;
    }
    return pieces;
}

}  // namespace anvil::engine
