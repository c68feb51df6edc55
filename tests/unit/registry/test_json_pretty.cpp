// registry::JsonIndenter: re-indenting compact JSON text, fed whole or in pieces split anywhere,
// gives exactly what nlohmann's dump(indent) gives for the same document.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "registry/json_pretty.hpp"
#include "registry/json_reader.hpp"
#include "test_support.hpp"

using namespace anvil::registry;

namespace {

// Feeds `text` in pieces of 1..max_piece bytes, chosen by `seed`.
std::string indent_in_pieces(const std::string& text, int indent, std::size_t max_piece, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::size_t> size(1, max_piece);
    JsonIndenter indenter(indent);
    std::string out;
    for (std::size_t at = 0; at < text.size();) {
        const std::size_t n = std::min(size(rng), text.size() - at);
        indenter.feed(std::string_view(text).substr(at, n), out);
        at += n;
    }
    CHECK(indenter.at_top_level());
    return out;
}

}  // namespace

TEST_CASE("re-indented compact JSON is exactly dump(indent), whole or split anywhere", "[json]") {
    const json docs[] = {
        json::parse(anvil::test::seed_text("004_")),
        json::parse(R"({"a":[],"b":{},"c":[{}],"d":[[],[1,2,{"x":null}]],"e":"q\"uo\\te:,{}[]","f":-1.5e-07,"g":true})"),
        json("a lone string with \"escapes\" \\ and \u00e9 and \u0001"),
        json(42),
        json::array(),
        json::object(),
    };
    for (const json& doc : docs) {
        const std::string compact = doc.dump();
        for (int indent : {0, 2, 4}) {
            INFO(compact.substr(0, 200) << " at indent " << indent);
            CHECK(pretty_json(compact, indent) == doc.dump(indent));
            for (std::size_t piece : {1, 2, 7, 4096})
                CHECK(indent_in_pieces(compact, indent, piece, static_cast<unsigned>(piece)) == doc.dump(indent));
        }
    }
}

TEST_CASE("whitespace already in the text is dropped: pretty text re-indents to itself", "[json]") {
    const json doc = json::parse(R"({"k": [1, 2, {"s": "a b\n c"}], "e": {}})");
    CHECK(pretty_json(doc.dump(2)) == doc.dump(2));
    CHECK(pretty_json(" {\n\t\"k\" :\r\n [ 1 ] } ") == json::parse(R"({"k":[1]})").dump(2));
    std::string out = "kept:";
    append_pretty_json(out, "[1]");
    CHECK(out == "kept:[\n  1\n]");
}
