#include "daemon/cli/arguments.hpp"

#include <charconv>

namespace anvil::cli {

Arguments::Arguments(const std::vector<std::string>& words, const std::set<std::string>& value_flags,
                     const std::set<std::string>& switches) {
    for (std::size_t i = 0; i < words.size(); ++i) {
        const std::string& w = words[i];
        if (!w.starts_with("--") || w == "--") {
            positional_.push_back(w);
            continue;
        }
        std::string flag = w, value;
        bool inline_value = false;
        if (auto eq = w.find('='); eq != std::string::npos) {
            flag = w.substr(0, eq);
            value = w.substr(eq + 1);
            inline_value = true;
        }
        if (switches.count(flag)) {
            if (inline_value) throw UsageError(flag + " takes no value");
            switches_.insert(flag);
        } else if (value_flags.count(flag)) {
            if (!inline_value) {
                if (i + 1 >= words.size()) throw UsageError(flag + " needs a value");
                value = words[++i];
            }
            values_[flag] = value;
        } else {
            throw UsageError("unknown option " + flag);
        }
    }
}

std::optional<std::string> Arguments::value(const std::string& flag) const {
    auto it = values_.find(flag);
    if (it == values_.end()) return std::nullopt;
    return it->second;
}

std::string Arguments::value_or(const std::string& flag, const std::string& fallback) const {
    return value(flag).value_or(fallback);
}

std::size_t Arguments::positive_or(const std::string& flag, std::size_t fallback) const {
    const auto text = value(flag);
    if (!text) return fallback;
    std::size_t n = 0;
    const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), n);
    if (error != std::errc() || end != text->data() + text->size() || n == 0)
        throw UsageError(flag + " must be a positive whole number, not '" + *text + "'");
    return n;
}

}  // namespace anvil::cli
