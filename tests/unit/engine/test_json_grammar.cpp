// Structured output's grammar and matcher, without a model: schemas of the subset compile and
// others are refused naming the path; the matcher takes exactly the JSON texts a schema allows
// (within its whitespace and digit bounds); and random walks through the matcher (any byte it
// accepts, chosen at random) always end in text that parses and that an independent checker of
// the subset finds valid.
#include <catch2/catch.hpp>

#include <random>

#include <nlohmann/json.hpp>

#include "engine/json_grammar.hpp"

using namespace anvil::engine;
using ojson = nlohmann::ordered_json;

namespace {

std::shared_ptr<const JsonGrammar> grammar(const char* schema) { return JsonGrammar::from_schema(ojson::parse(schema), "schema"); }

// Whether the matcher takes the whole text and the value is then complete.
bool takes(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
    JsonMatcher m(g);
    return m.feed(text) && m.can_end();
}

std::string refusal(const char* schema) {
    try {
        grammar(schema);
    } catch (const UnsupportedSchema& e) {
        return e.what();
    }
    return "(compiled)";
}

// The subset's meaning, checked on a parsed value independently of the grammar: written from
// JSON Schema's rules, not from the matcher.
bool valid(const ojson& v, const ojson& s) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("const")) return v == s["const"];
    if (s.contains("enum")) {
        bool found = false;
        for (const auto& e : s["enum"]) found = found || e == v;
        if (!found) return false;
    }
    if (s.contains("type")) {
        std::vector<std::string> types;
        if (s["type"].is_string()) types.push_back(s["type"]);
        else for (const auto& t : s["type"]) types.push_back(t);
        bool any = false;
        for (const auto& t : types)
            any = any || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
                  (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) ||
                  (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
        if (!any) return false;
    }
    if (v.is_object()) {
        if (s.contains("required"))
            for (const auto& r : s["required"])
                if (!v.contains(r.get<std::string>())) return false;
        if (s.contains("properties")) {
            for (const auto& [k, sub] : v.items()) {
                if (s["properties"].contains(k)) {
                    if (!valid(sub, s["properties"][k])) return false;
                } else if (!s.value("additionalProperties", true)) {
                    return false;
                }
            }
        }
    }
    if (v.is_string()) {
        size_t characters = 0;
        for (unsigned char c : v.get<std::string>()) characters += (c & 0xC0) != 0x80;
        if (s.contains("minLength") && characters < s["minLength"].get<size_t>()) return false;
        if (s.contains("maxLength") && characters > s["maxLength"].get<size_t>()) return false;
    }
    if (v.is_array()) {
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
        if (s.contains("items"))
            for (const auto& item : v)
                if (!valid(item, s["items"])) return false;
    }
    return true;
}

// A random text the matcher accepts: at each step one of the bytes it takes, chosen at random
// (structural bytes and the end favoured, so that walks finish); empty if it ran past the limit.
std::string random_walk(const std::shared_ptr<const JsonGrammar>& g, std::mt19937& rng, size_t limit = 4000) {
    JsonMatcher m(g);
    std::string text;
    std::vector<uint8_t> options, favoured;
    while (!m.done()) {
        if (m.can_end() && rng() % 4 == 0) break;
        options.clear();
        favoured.clear();
        for (int b = 0; b < 256; ++b) {
            JsonMatcher probe = m;
            if (!probe.feed(uint8_t(b))) continue;
            options.push_back(uint8_t(b));
            if (std::string("\"]},:").find(char(b)) != std::string::npos) favoured.push_back(uint8_t(b));
        }
        if (options.empty()) {
            REQUIRE(m.can_end());  // a value that cannot end and cannot go on is a dead end
            break;
        }
        const auto& pool = !favoured.empty() && rng() % 3 == 0 ? favoured : options;
        const uint8_t b = pool[rng() % pool.size()];
        REQUIRE(m.feed(b));
        text.push_back(char(b));
        if (text.size() > limit) return {};
    }
    return text;
}

}  // namespace

TEST_CASE("json grammar: texts a schema allows are taken, others refused", "[engine][structured]") {
    const auto person = grammar(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}, "required": ["name", "age"]})");
    CHECK(takes(person, R"({"name":"Ann","age":31})"));
    CHECK(takes(person, R"({"name": "Ann", "age": -3, "tags": ["a", "b"]})"));
    CHECK(takes(person, "{\n  \"name\": \"\\u00e9\\n\",\n  \"age\": 0\n}"));
    CHECK(takes(person, "{\"name\":\"caf\xC3\xA9 \xF0\x9F\x98\x80\",\"age\":7}"));
    CHECK_FALSE(takes(person, R"({"age":31,"name":"Ann"})"));           // the schema's order
    CHECK_FALSE(takes(person, R"({"name":"Ann"})"));                    // age is required
    CHECK_FALSE(takes(person, R"({"name":"Ann","age":3.5})"));          // an integer
    CHECK_FALSE(takes(person, R"({"name":"Ann","age":01})"));           // no leading zero
    CHECK_FALSE(takes(person, R"({"name":"Ann","age":3,"x":1})"));      // undeclared
    CHECK_FALSE(takes(person, R"({"name":"Ann","age":3,"tags":["c"]})"));
    CHECK_FALSE(takes(person, R"({"name":"Ann","age":3,"tags":["a","a","a"]})"));
    CHECK_FALSE(takes(person, "{\"name\":\"a\tb\",\"age\":3}"));        // a raw control character
    CHECK_FALSE(takes(person, "{\"name\":\"\\q\",\"age\":3}"));          // no such escape
    CHECK_FALSE(takes(person, "{\"name\":\"\xC0\xAF\",\"age\":3}"));     // overlong UTF-8
    CHECK_FALSE(takes(person, "{\"name\":\"\xED\xA0\x80\",\"age\":3}")); // a surrogate
    CHECK_FALSE(takes(person, "{\"name\":\"Ann\",  \"age\":3}"));        // two spaces
    CHECK(takes(person, "{\"name\":\"\\ud83d\\ude00\",\"age\":3}"));        // a surrogate pair
    CHECK_FALSE(takes(person, "{\"name\":\"\\udc00\",\"age\":3}"));       // a low surrogate alone
    CHECK_FALSE(takes(person, "{\"name\":\"\\ud83d\",\"age\":3}"));       // a high one alone
    CHECK_FALSE(takes(person, "{\"name\":\"\\ud83d\\u0041\",\"age\":3}"));  // not followed by a low one
    CHECK_FALSE(takes(person, "{\"name\":\"Ann\",\"age\":12345678901234567}"));  // 17 digits
    CHECK_FALSE(takes(person, R"({"name":"Ann","age":3}x)"));           // nothing after the value

    const auto numbers = grammar(R"({"type": "array", "items": {"type": "number"}, "minItems": 1})");
    CHECK(takes(numbers, "[0,-0.5,1e10,2.25E-3,7]"));
    CHECK_FALSE(takes(numbers, "[]"));
    CHECK_FALSE(takes(numbers, "[1.]"));
    CHECK_FALSE(takes(numbers, "[.5]"));
    CHECK_FALSE(takes(numbers, "[1,]"));
    CHECK_FALSE(takes(numbers, "[+1]"));

    const auto any = JsonGrammar::any_object();
    CHECK(takes(any, R"({"a":[1,{"b":null,"c":[true,false,"x"]}],"d":{}})"));
    CHECK_FALSE(takes(any, "[1]"));  // json_object: an object at the top
    CHECK_FALSE(takes(any, "{'a':1}"));

    const auto nullable = grammar(R"({"type": ["string", "null", "integer"]})");
    CHECK(takes(nullable, "null"));
    CHECK(takes(nullable, "\"x\""));
    CHECK(takes(nullable, "42"));
    CHECK_FALSE(takes(nullable, "true"));
    CHECK_FALSE(takes(nullable, "4.2"));

    const auto bounded = grammar(R"({"type": "string", "minLength": 2, "maxLength": 3})");
    CHECK(takes(bounded, "\"ab\""));
    CHECK(takes(bounded, "\"a\\nb\""));              // an escape is one character
    CHECK(takes(bounded, "\"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\""));  // three characters, nine bytes
    CHECK_FALSE(takes(bounded, "\"a\""));
    CHECK_FALSE(takes(bounded, "\"abcd\""));
    CHECK_FALSE(takes(bounded, "\"\\u00e9bcd\""));
    JsonMatcher limited(bounded);
    REQUIRE(limited.feed("\"ab"));
    CHECK_FALSE(limited.in_plain_string());  // text moves the count: no shortcut past the limit

    const auto choice = grammar(R"({"enum": ["red", "green", 1, 10, null, {"k": [1]}]})");
    for (const char* ok : {"\"red\"", "\"green\"", "1", "10", "null", "{\"k\":[1]}"}) CHECK(takes(choice, ok));
    for (const char* no : {"\"blue\"", "2", "100", "\"re\""}) CHECK_FALSE(takes(choice, no));
}

TEST_CASE("json grammar: a whole value ends the answer, a number may still go on", "[engine][structured]") {
    JsonMatcher object(JsonGrammar::any_object());
    REQUIRE(object.feed("{\"a\":1"));
    CHECK_FALSE(object.can_end());
    REQUIRE(object.feed("}"));
    CHECK(object.done());
    CHECK_FALSE(object.feed(' '));

    JsonMatcher number(grammar(R"({"type": "number"})"));
    REQUIRE(number.feed("12"));
    CHECK(number.can_end());
    CHECK_FALSE(number.done());
    CHECK(number.feed("5"));

    JsonMatcher text(grammar(R"({"type": "string"})"));
    REQUIRE(text.feed("\"ab"));
    CHECK(text.in_plain_string());
    REQUIRE(text.feed('\\'));
    CHECK_FALSE(text.in_plain_string());
}

TEST_CASE("json grammar: keywords outside the subset are refused, naming the path", "[engine][structured]") {
    CHECK_THAT(refusal(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}})"),
               Catch::Contains("schema.properties.age.minimum: this keyword is not supported") &&
                   Catch::Contains("supported keywords are type, properties"));
    CHECK_THAT(refusal(R"({"anyOf": [{"type": "string"}]})"), Catch::Contains("schema.anyOf"));
    CHECK_THAT(refusal(R"({"$ref": "#/$defs/x"})"), Catch::Contains("schema.$ref"));
    CHECK_THAT(refusal(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})"),
               Catch::Contains("schema.required[0]") && Catch::Contains("\"b\" is required but not among the properties"));
    CHECK_THAT(refusal(R"({"type": "strin"})"), Catch::Contains("schema.type: expected one of object"));
    CHECK_THAT(refusal(R"({"type": "array", "minItems": 3, "maxItems": 2})"), Catch::Contains("minItems is above maxItems"));
    CHECK_THAT(refusal(R"({"type": "object", "additionalProperties": {"type": "string"}})"),
               Catch::Contains("schema.additionalProperties: only true or false"));
    CHECK_THAT(refusal(R"({"enum": []})"), Catch::Contains("schema.enum: expected a non-empty list"));
    CHECK_THAT(refusal(R"({"type": "string", "maxLength": -1})"), Catch::Contains("schema.maxLength: expected a whole number"));
    CHECK_THAT(refusal(R"({"type": "string", "minLength": 4, "maxLength": 3})"), Catch::Contains("minLength is above maxLength"));
    CHECK_THAT(refusal(R"({"type": "string", "enum": [1, 2]})"), Catch::Contains("no value in the list has the schema's type"));
    CHECK_THAT(refusal("false"), Catch::Contains("allows no value"));
    std::string deep = "{}";  // 40 levels of items: refused, not recursed into without a bound
    for (int i = 0; i < 40; ++i) deep = "{\"type\": \"array\", \"items\": " + deep + "}";
    CHECK_THAT(refusal(deep.c_str()), Catch::Contains("nests deeper than 32 levels"));
    CHECK_THAT(refusal(R"({"type": "object", "title": "T", "description": "d", "properties": {"a": {"type": "string", "default": "x"}}})"),
               Catch::Equals("(compiled)"));
}

TEST_CASE("json grammar: random walks end in JSON that parses and is valid against the schema", "[engine][structured]") {
    const std::vector<std::string> schemas = {
        R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 2, "maxLength": 5}, "age": {"type": "integer"},
            "height": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "pet": {"type": ["object", "null"], "properties": {"kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer"}},
                    "required": ["kind"]}, "ok": {"type": "boolean"}}, "required": ["name", "ok"], "additionalProperties": false})",
        R"({"type": "array", "items": {"type": "array", "items": {"type": ["number", "string", "boolean"]}, "minItems": 1}, "minItems": 2, "maxItems": 4})",
        R"({"type": "object"})",
        R"({})",
        R"({"type": "object", "properties": {"a": {"const": {"x": [1, 2]}}, "b": {"type": "object", "properties": {}, "additionalProperties": false}}, "required": ["a", "b"]})",
    };
    std::mt19937 rng(20261202);
    for (const auto& text : schemas) {
        const ojson schema = ojson::parse(text);
        const auto g = JsonGrammar::from_schema(schema, "schema");
        int finished = 0;
        for (int walk = 0; walk < 150; ++walk) {
            const std::string out = random_walk(g, rng);
            if (out.empty()) continue;
            ++finished;
            INFO("schema " << text << "\nwalk " << walk << ": " << out);
            REQUIRE(ojson::accept(out));
            REQUIRE(valid(ojson::parse(out), schema));
        }
        CHECK(finished > 100);
    }
    // json_object: any object at all
    const auto any = JsonGrammar::any_object();
    for (int walk = 0; walk < 150; ++walk) {
        const std::string out = random_walk(any, rng);
        if (out.empty()) continue;
        INFO(out);
        REQUIRE(ojson::accept(out));
        REQUIRE(ojson::parse(out).is_object());
    }
}
