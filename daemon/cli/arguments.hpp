// A small command-line reader: positional words and --flag VALUE / --flag=VALUE options.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace anvil::cli {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Arguments {
public:
    // `value_flags` take a value; `switches` do not. Anything else starting with "--" is an error.
    Arguments(const std::vector<std::string>& words, const std::set<std::string>& value_flags,
              const std::set<std::string>& switches = {});

    const std::vector<std::string>& positional() const { return positional_; }
    std::optional<std::string> value(const std::string& flag) const;
    std::string value_or(const std::string& flag, const std::string& fallback) const;
    bool has(const std::string& flag) const { return switches_.count(flag) > 0; }
    // The flag's value as a positive whole number (a byte count, say), `fallback` when absent;
    // anything else is a UsageError naming the flag.
    std::size_t positive_or(const std::string& flag, std::size_t fallback) const;

private:
    std::vector<std::string> positional_;
    std::map<std::string, std::string> values_;
    std::set<std::string> switches_;
};

}  // namespace anvil::cli
