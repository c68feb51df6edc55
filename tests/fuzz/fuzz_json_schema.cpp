// Fuzzes structured output's grammar, which compiles a schema every client sends and then judges
// every byte the model writes: an input is a schema (JSON text up to the first NUL byte) and the
// bytes of an answer after it. Compiling must either succeed or refuse with UnsupportedSchema;
// feeding the answer must not crash; and the matcher must be sound: whenever it has taken the
// whole answer and says the value is whole, the answer parses as JSON (a grammar that lets
// non-JSON through would break every client's parser).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/json_grammar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const size_t split = input.find('\0');
    const std::string_view schema_text = input.substr(0, split);
    const std::string_view answer = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
    std::shared_ptr<const anvil::engine::JsonGrammar> grammar;
    if (schema_text == "json_object") {
        grammar = anvil::engine::JsonGrammar::any_object();
    } else {
        const auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, false);
        if (schema.is_discarded()) return 0;
        try {
            grammar = anvil::engine::JsonGrammar::from_schema(schema, "schema");
        } catch (const anvil::engine::UnsupportedSchema&) {
            return 0;
        }
    }
    anvil::engine::JsonMatcher matcher(grammar);
    std::string accepted;  // the bytes the matcher took, in order: the answer it let through
    for (unsigned char c : answer) {
        if (matcher.done()) break;
        const anvil::engine::JsonMatcher before = matcher;
        if (!matcher.feed(c)) {
            matcher = before;  // a refused byte leaves the state undefined: go on from the last good one
            continue;
        }
        accepted.push_back(char(c));
        if (matcher.can_end() && !nlohmann::json::accept(accepted)) __builtin_trap();
    }
    return 0;
}
