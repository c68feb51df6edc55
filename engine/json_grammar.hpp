// Structured output: a JSON schema (the supported subset) or "any JSON object" compiled into a
// grammar, and the matcher that walks it one byte at a time. The engine asks the matcher which
// tokens may come next (token_mask.*) and advances it by each token it samples, so the cost per
// token does not grow with the answer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil::engine {

// A schema the grammar cannot express; `what()` names the JSON path and what was expected.
struct UnsupportedSchema : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

class JsonGrammar {
public:
    // Any JSON object, as response_format {"type": "json_object"} asks.
    static std::shared_ptr<const JsonGrammar> any_object();
    // The values `schema` allows, within the subset: type (one or a list), properties, required,
    // additionalProperties (false, true or absent: only the declared properties are generated),
    // items, minItems, maxItems, minLength, maxLength, enum, const, and annotations (title, description, default,
    // examples, $schema, $id, $comment). Properties come in the schema's order, the required ones
    // always, the others when the model chooses them. `where` prefixes the paths in errors.
    static std::shared_ptr<const JsonGrammar> from_schema(const nlohmann::ordered_json& schema, const std::string& where);

    // Sequence and Choice frame values in exact text: a tool call's syntax around its arguments.
    enum class Kind : uint8_t { Object, Array, String, Number, Integer, Literals, Union, Sequence, Choice };
    static constexpr uint32_t kNone = UINT32_MAX;
    struct Property {
        std::string key;  // as JSON text after the opening quote, closing quote included
        uint32_t node;
        bool required;
    };
    struct Node {
        Kind kind = Kind::Union;
        // Object: the declared properties in order, or, when free_keys, any keys with any values.
        std::vector<Property> properties;
        bool free_keys = false;
        // String: its length in characters (an escape is one)
        uint32_t min_length = 0, max_length = UINT32_MAX;
        // Array
        uint32_t items = kNone;
        uint32_t min_items = 0, max_items = UINT32_MAX;
        // Literals: the root of its texts in the literal trie
        uint32_t literal_root = kNone;
        // Union: the node a value goes on as, by its first character
        uint32_t on_object = kNone, on_array = kNone, on_string = kNone, on_number = kNone, on_literal = kNone;
        // Sequence: exact texts and values, in order (each part one or the other)
        struct Part {
            std::string text;
            uint32_t node = kNone;
        };
        std::vector<Part> parts;
        // Choice: literal_root's texts, each leading to its option (a Sequence) where it ends
    };
    // The texts of enums, const, true, false and null, as one trie of bytes.
    struct LiteralNode {
        std::vector<std::pair<uint8_t, uint32_t>> next;
        bool terminal = false;
        uint32_t option = kNone;  // in a Choice's texts: the Sequence that follows this one
    };

    uint32_t root() const { return root_; }
    uint32_t any() const { return any_; }  // the union of every value, when a free object or array uses it
    const Node& node(uint32_t i) const { return nodes_[i]; }
    const LiteralNode& literal(uint32_t i) const { return literals_[i]; }
    uint32_t literal_next(uint32_t at, uint8_t byte) const;

    static constexpr size_t kMaxNodes = 4096;
    static constexpr size_t kMaxProperties = 64;  // an object's, so that a key's candidates fit a mask

    // Building (json_grammar.cpp). compile() adds a schema's values and returns its node, so that
    // several schemas can sit in one grammar (a call to any of several tools).
    uint32_t compile(const nlohmann::ordered_json& schema, const std::string& where);
    uint32_t add_sequence(std::vector<Node::Part> parts);
    // The texts must be distinct and none a prefix of another (each names its option).
    uint32_t add_choice(const std::vector<std::pair<std::string, uint32_t>>& options);
    uint32_t add(Node node);
    uint32_t add_literals(const std::vector<std::string>& texts);
    uint32_t any_value();
    void set_root(uint32_t root) { root_ = root; }

private:
    std::vector<Node> nodes_;
    std::vector<LiteralNode> literals_;
    uint32_t root_ = kNone;
    uint32_t any_ = kNone;
};

// Where a JSON text stands against a grammar, advanced a byte at a time. Whitespace between
// tokens is bounded, as llama.cpp's JSON grammars bound it: one space, or a newline and up to 20
// spaces or tabs of indentation. Numbers have at most 16 digits before and after the point and 2 in
// the exponent (so that every one fits a double: strict parsers refuse 1e400); nesting at most
// kMaxDepth values. Copying one is cheap: only the frames in use are copied.
class JsonMatcher {
public:
    explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);
    JsonMatcher(const JsonMatcher& other) : grammar_(other.grammar_) { assign(other); }
    JsonMatcher& operator=(const JsonMatcher& other) {
        if (this != &other) grammar_ = other.grammar_, assign(other);
        return *this;
    }

    // False (and the state undefined) when `byte` cannot come next.
    bool feed(uint8_t byte);
    bool feed(const std::string& bytes);
    // The text so far is a whole value (and may still go on, as a number may)
    bool can_end() const;
    // The text is a whole value and nothing can follow.
    bool done() const { return depth_ == 0; }
    // Inside a string's free text, between characters: any text without a quote, backslash or
    // control character, in whole UTF-8 characters, keeps the state as it is but for its length.
    bool in_plain_string() const;

    // Copies `other`'s state (same grammar) without the unused frames.
    void assign(const JsonMatcher& other);

    static constexpr int kMaxDepth = 40;

private:
    struct Frame {
        uint32_t node;
        uint8_t phase;
        uint8_t ws;       // whitespace seen in the current gap
        uint16_t count;   // digits, hex digits or UTF-8 continuation bytes; key bytes matched
        uint32_t aux;     // items so far; next property; literal trie node; continuation range
        uint64_t keys;    // the declared keys still matching the key being written; a string's characters
    };
    enum class Step { Take, Reject, Pass, Retry };
    Step step(Frame& f, uint8_t c);
    Step start_value(Frame& f, uint8_t c);
    Step object(Frame& f, uint8_t c);
    Step array(Frame& f, uint8_t c);
    Step string(Frame& f, uint8_t c);
    Step number(Frame& f, uint8_t c);
    Step literal(Frame& f, uint8_t c);
    Step sequence(Frame& f, uint8_t c);
    Step choice(Frame& f, uint8_t c);
    bool push(uint32_t node);
    bool start_key(Frame& f);

    std::shared_ptr<const JsonGrammar> grammar_;
    const JsonGrammar* g_;
    int depth_ = 0;
    std::array<Frame, kMaxDepth> frames_;
};

}  // namespace anvil::engine
