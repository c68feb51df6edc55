#include "engine/json_grammar.hpp"

#include <algorithm>
#include <set>

namespace anvil::engine {

using ojson = nlohmann::ordered_json;

// ---- The grammar ---------------------------------------------------------------------------

uint32_t JsonGrammar::add(Node node) {
    if (nodes_.size() >= kMaxNodes)
        throw UnsupportedSchema("the schema is too large: more than " + std::to_string(kMaxNodes) + " values to constrain");
    nodes_.push_back(std::move(node));
    return uint32_t(nodes_.size() - 1);
}

uint32_t JsonGrammar::add_literals(const std::vector<std::string>& texts) {
    const uint32_t root = uint32_t(literals_.size());
    literals_.emplace_back();
    for (const std::string& text : texts) {
        uint32_t at = root;
        for (unsigned char c : text) {
            uint32_t next = literal_next(at, c);
            if (next == kNone) {
                next = uint32_t(literals_.size());
                literals_.emplace_back();
                literals_[at].next.emplace_back(c, next);
            }
            at = next;
        }
        literals_[at].terminal = true;
    }
    Node n;
    n.kind = Kind::Literals;
    n.literal_root = root;
    return add(std::move(n));
}

uint32_t JsonGrammar::literal_next(uint32_t at, uint8_t byte) const {
    for (const auto& [c, next] : literals_[at].next)
        if (c == byte) return next;
    return kNone;
}

uint32_t JsonGrammar::any_value() {
    if (any_ != kNone) return any_;
    any_ = add(Node{});  // the union, filled in below: its object's values and array's items are itself
    Node object;
    object.kind = Kind::Object;
    object.free_keys = true;
    const uint32_t object_id = add(std::move(object));
    Node array;
    array.kind = Kind::Array;
    array.items = any_;
    const uint32_t array_id = add(std::move(array));
    Node string;
    string.kind = Kind::String;
    const uint32_t string_id = add(std::move(string));
    Node number;
    number.kind = Kind::Number;
    const uint32_t number_id = add(std::move(number));
    const uint32_t literal_id = add_literals({"true", "false", "null"});
    Node& any = nodes_[any_];
    any.on_object = object_id;
    any.on_array = array_id;
    any.on_string = string_id;
    any.on_number = number_id;
    any.on_literal = literal_id;
    return any_;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() {
    auto g = std::make_shared<JsonGrammar>();
    g->set_root(g->node(g->any_value()).on_object);
    return g;
}

// ---- Compiling a schema --------------------------------------------------------------------

namespace {

const std::set<std::string>& annotations() {
    static const std::set<std::string> a = {"title", "description", "default", "examples", "$schema", "$id", "$comment"};
    return a;
}

const std::set<std::string>& keywords() {
    static const std::set<std::string> k = {"type",     "properties", "required",  "additionalProperties",
                                            "items",    "minItems",   "maxItems",  "minLength",
                                            "maxLength", "enum",      "const"};
    return k;
}

const char* kSupported =
    "the supported keywords are type, properties, required, additionalProperties (true or false), items, minItems, "
    "maxItems, minLength, maxLength, enum and const (with the annotations title, description, default, examples, "
    "$schema, $id and $comment)";

class SchemaCompiler {
public:
    explicit SchemaCompiler(JsonGrammar& g) : g_(g) {}

    uint32_t compile(const ojson& schema, const std::string& path, int depth) {
        if (depth > 32) throw UnsupportedSchema(path + ": the schema nests deeper than 32 levels");
        if (schema.is_boolean()) {
            if (schema.get<bool>()) return g_.any_value();
            throw UnsupportedSchema(path + ": the schema false allows no value at all");
        }
        if (!schema.is_object()) throw UnsupportedSchema(path + ": expected a schema (a JSON object), got " + type_name(schema));
        for (const auto& [key, value] : schema.items())
            if (!keywords().count(key) && !annotations().count(key))
                throw UnsupportedSchema(path + "." + key + ": this keyword is not supported; " + kSupported);

        const std::vector<std::string> types = types_of(schema, path);
        if (schema.contains("const")) return g_.add_literals({schema["const"].dump()});
        if (schema.contains("enum")) return enumeration(schema["enum"], types, path + ".enum");
        if (types.empty()) {
            if (schema.contains("properties") || schema.contains("required") || schema.contains("additionalProperties"))
                return object(schema, path, depth);
            if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems"))
                return array(schema, path, depth);
            if (schema.contains("minLength") || schema.contains("maxLength")) return string(schema, path);
            return g_.any_value();
        }
        if (types.size() == 1) return of_type(types[0], schema, path, depth);
        JsonGrammar::Node u;
        u.kind = JsonGrammar::Kind::Union;
        std::vector<std::string> literals;
        bool integer_only = true;
        for (const std::string& t : types) {
            if (t == "object") u.on_object = object(schema, path, depth);
            else if (t == "array") u.on_array = array(schema, path, depth);
            else if (t == "string") u.on_string = string(schema, path);
            else if (t == "number") integer_only = false, u.on_number = JsonGrammar::kNone;
            else if (t == "boolean") literals.push_back("true"), literals.push_back("false");
            else if (t == "null") literals.push_back("null");
        }
        const bool has_number = std::count(types.begin(), types.end(), "number") || std::count(types.begin(), types.end(), "integer");
        if (has_number) u.on_number = number(integer_only);
        if (!literals.empty()) u.on_literal = g_.add_literals(literals);
        return g_.add(std::move(u));
    }

private:
    static std::string type_name(const ojson& v) {
        if (v.is_number_integer()) return "an integer";
        if (v.is_number()) return "a number";
        if (v.is_string()) return "a string";
        if (v.is_boolean()) return "a boolean";
        if (v.is_null()) return "null";
        if (v.is_array()) return "an array";
        return "an object";
    }

    static std::vector<std::string> types_of(const ojson& schema, const std::string& path) {
        std::vector<std::string> out;
        if (!schema.contains("type")) return out;
        static const std::set<std::string> known = {"object", "array", "string", "number", "integer", "boolean", "null"};
        const ojson& t = schema["type"];
        const auto one = [&](const ojson& v, const std::string& where) {
            if (!v.is_string() || !known.count(v.get<std::string>()))
                throw UnsupportedSchema(where + ": expected one of object, array, string, number, integer, boolean, null; got " +
                                        v.dump());
            if (std::find(out.begin(), out.end(), v.get<std::string>()) == out.end()) out.push_back(v.get<std::string>());
        };
        if (t.is_array()) {
            if (t.empty()) throw UnsupportedSchema(path + ".type: an empty list of types allows no value");
            for (size_t i = 0; i < t.size(); ++i) one(t[i], path + ".type[" + std::to_string(i) + "]");
        } else {
            one(t, path + ".type");
        }
        return out;
    }

    static bool has_type(const ojson& v, const std::vector<std::string>& types) {
        if (types.empty()) return true;
        for (const std::string& t : types) {
            if ((t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
                (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) ||
                (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()))
                return true;
            // 2.0 is an integer in JSON Schema's sense, though JSON writes it with a fraction
            if (t == "integer" && v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>()))) return true;
        }
        return false;
    }

    uint32_t enumeration(const ojson& values, const std::vector<std::string>& types, const std::string& path) {
        if (!values.is_array() || values.empty()) throw UnsupportedSchema(path + ": expected a non-empty list of values");
        std::vector<std::string> texts;
        for (const auto& v : values)
            if (has_type(v, types)) texts.push_back(v.dump());
        if (texts.empty()) throw UnsupportedSchema(path + ": no value in the list has the schema's type");
        return g_.add_literals(texts);
    }

    uint32_t of_type(const std::string& t, const ojson& schema, const std::string& path, int depth) {
        if (t == "object") return object(schema, path, depth);
        if (t == "array") return array(schema, path, depth);
        if (t == "string") return string(schema, path);
        if (t == "number") return number(false);
        if (t == "integer") return number(true);
        if (t == "boolean") return g_.add_literals({"true", "false"});
        return g_.add_literals({"null"});
    }

    uint32_t string(const ojson& schema, const std::string& path) {
        JsonGrammar::Node n;
        n.kind = JsonGrammar::Kind::String;
        n.min_length = bound(schema, path, "minLength", 0);
        n.max_length = bound(schema, path, "maxLength", UINT32_MAX);
        if (n.min_length > n.max_length) throw UnsupportedSchema(path + ": minLength is above maxLength, so no string fits");
        return g_.add(std::move(n));
    }

    static uint32_t bound(const ojson& schema, const std::string& path, const char* key, uint32_t fallback) {
        if (!schema.contains(key)) return fallback;
        const ojson& v = schema[key];
        if (!v.is_number_unsigned() || v.get<uint64_t>() > 1000000)
            throw UnsupportedSchema(path + "." + key + ": expected a whole number from 0 to 1000000");
        return uint32_t(v.get<uint64_t>());
    }

    uint32_t number(bool integer) {
        JsonGrammar::Node n;
        n.kind = integer ? JsonGrammar::Kind::Integer : JsonGrammar::Kind::Number;
        return g_.add(std::move(n));
    }

    uint32_t object(const ojson& schema, const std::string& path, int depth) {
        if (schema.contains("additionalProperties") && !schema["additionalProperties"].is_boolean())
            throw UnsupportedSchema(path + ".additionalProperties: only true or false is supported, not a schema");
        const bool declared = schema.contains("properties");
        if (!declared) {
            if (schema.contains("required") && !schema["required"].empty())
                throw UnsupportedSchema(path + ".required: names properties, but the schema declares none (properties)");
            if (schema.value("additionalProperties", true)) return g_.node(g_.any_value()).on_object;
            JsonGrammar::Node empty;  // additionalProperties false and no properties: {}
            empty.kind = JsonGrammar::Kind::Object;
            return g_.add(std::move(empty));
        }
        const ojson& properties = schema["properties"];
        if (!properties.is_object())
            throw UnsupportedSchema(path + ".properties: expected an object mapping names to schemas");
        if (properties.size() > JsonGrammar::kMaxProperties)
            throw UnsupportedSchema(path + ".properties: more than " + std::to_string(JsonGrammar::kMaxProperties) +
                                    " properties in one object");
        std::set<std::string> required;
        if (schema.contains("required")) {
            const ojson& r = schema["required"];
            if (!r.is_array()) throw UnsupportedSchema(path + ".required: expected a list of property names");
            for (size_t i = 0; i < r.size(); ++i) {
                const std::string where = path + ".required[" + std::to_string(i) + "]";
                if (!r[i].is_string()) throw UnsupportedSchema(where + ": expected a property name (a string)");
                if (!properties.contains(r[i].get<std::string>()))
                    throw UnsupportedSchema(where + ": \"" + r[i].get<std::string>() +
                                            "\" is required but not among the properties, so no object could have it");
                required.insert(r[i].get<std::string>());
            }
        }
        JsonGrammar::Node n;
        n.kind = JsonGrammar::Kind::Object;
        for (const auto& [name, sub] : properties.items()) {
            const uint32_t node = compile(sub, path + ".properties." + name, depth + 1);
            n.properties.push_back({ojson(name).dump().substr(1), node, required.count(name) > 0});
        }
        return g_.add(std::move(n));
    }

    uint32_t array(const ojson& schema, const std::string& path, int depth) {
        JsonGrammar::Node n;
        n.kind = JsonGrammar::Kind::Array;
        n.items = schema.contains("items") ? compile(schema["items"], path + ".items", depth + 1) : g_.any_value();
        n.min_items = bound(schema, path, "minItems", 0);
        n.max_items = bound(schema, path, "maxItems", UINT32_MAX);
        if (n.min_items > n.max_items) throw UnsupportedSchema(path + ": minItems is above maxItems, so no array fits");
        return g_.add(std::move(n));
    }

    JsonGrammar& g_;
};

}  // namespace

uint32_t JsonGrammar::compile(const ojson& schema, const std::string& where) {
    SchemaCompiler compiler(*this);
    return compiler.compile(schema, where, 0);
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(const ojson& schema, const std::string& where) {
    auto g = std::make_shared<JsonGrammar>();
    g->set_root(g->compile(schema, where));
    return g;
}

uint32_t JsonGrammar::add_sequence(std::vector<Node::Part> parts) {
    Node n;
    n.kind = Kind::Sequence;
    n.parts = std::move(parts);
    return add(std::move(n));
}

uint32_t JsonGrammar::add_choice(const std::vector<std::pair<std::string, uint32_t>>& options) {
    std::vector<std::string> texts;
    for (const auto& [text, _] : options) texts.push_back(text);
    const uint32_t id = add_literals(texts);
    Node& n = nodes_[id];
    n.kind = Kind::Choice;
    for (const auto& [text, option] : options) {
        uint32_t at = n.literal_root;
        for (unsigned char c : text) at = literal_next(at, c);
        if (!literals_[at].next.empty() || literals_[at].option != kNone)
            throw std::logic_error("a choice's texts must be distinct and none a prefix of another");
        literals_[at].option = option;
    }
    return id;
}

// ---- The matcher ---------------------------------------------------------------------------

namespace {
// Phases; 0 is a value not yet begun for every frame.
constexpr uint8_t kStart = 0;
constexpr uint8_t kObjOpen = 1, kObjKey = 2, kObjColon = 3, kObjAfterValue = 4, kObjAfterComma = 5;
constexpr uint8_t kArrOpen = 1, kArrAfterValue = 2, kArrAfterComma = 3;
// \u escapes: a high surrogate must be followed by a \u low one, and a low one alone is refused,
// as strict parsers (nlohmann's among them) refuse it.
constexpr uint8_t kStrBody = 1, kStrEscape = 2, kStrHex = 3, kStrPairBackslash = 4, kStrPairU = 5, kStrPairHex = 6;
constexpr uint8_t kNumMinus = 1, kNumZero = 2, kNumInt = 3, kNumDot = 4, kNumFrac = 5, kNumE = 6, kNumESign = 7, kNumExp = 8;
constexpr uint8_t kLitIn = 1;
constexpr int kMaxDigits = 16, kMaxExponentDigits = 2, kMaxIndent = 20;

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint32_t hex_value(uint8_t c) { return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }

enum class Gap { NotSpace, Took, Bad };
// ws: 0 nothing yet; 1 one space (the gap is closed); 2 + k a newline and k spaces or tabs.
Gap gap(uint8_t& ws, uint8_t c) {
    if (c == ' ') {
        if (ws == 0) return ws = 1, Gap::Took;
        if (ws >= 2 && ws < 2 + kMaxIndent) return ++ws, Gap::Took;
        return Gap::Bad;
    }
    if (c == '\t') {
        if (ws >= 2 && ws < 2 + kMaxIndent) return ++ws, Gap::Took;
        return Gap::Bad;
    }
    if (c == '\n') {
        if (ws == 0) return ws = 2, Gap::Took;
        return Gap::Bad;
    }
    if (c == '\r') return Gap::Bad;
    return Gap::NotSpace;
}
}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)), g_(grammar_.get()) {
    push(g_->root());
}

void JsonMatcher::assign(const JsonMatcher& other) {
    g_ = other.g_;
    depth_ = other.depth_;
    std::copy(other.frames_.begin(), other.frames_.begin() + depth_, frames_.begin());
}

bool JsonMatcher::push(uint32_t node) {
    if (depth_ == kMaxDepth) return false;
    frames_[size_t(depth_++)] = Frame{node, kStart, 0, 0, 0, 0};
    return true;
}

bool JsonMatcher::feed(const std::string& bytes) {
    for (unsigned char c : bytes)
        if (!feed(c)) return false;
    return true;
}

bool JsonMatcher::feed(uint8_t c) {
    while (depth_ > 0) {
        switch (step(frames_[size_t(depth_ - 1)], c)) {
            case Step::Take:
                // A sequence whose last part was the value that just ended is whole too.
                while (depth_ > 0) {
                    const Frame& top = frames_[size_t(depth_ - 1)];
                    const JsonGrammar::Node& n = g_->node(top.node);
                    if (n.kind != JsonGrammar::Kind::Sequence || top.phase == kStart || top.aux < n.parts.size()) break;
                    --depth_;
                }
                return true;
            case Step::Reject: return false;
            case Step::Pass: --depth_; break;  // the value ended before c: its container takes c
            case Step::Retry: break;           // a new frame on top takes c
        }
    }
    return false;  // nothing may follow the whole value
}

bool JsonMatcher::can_end() const {
    if (depth_ == 0) return true;
    if (depth_ > 1) return false;
    const Frame& f = frames_[0];
    const JsonGrammar::Node& n = g_->node(f.node);
    if (n.kind == JsonGrammar::Kind::Number || n.kind == JsonGrammar::Kind::Integer)
        return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac || f.phase == kNumExp;
    if (n.kind == JsonGrammar::Kind::Literals) return f.phase == kLitIn && g_->literal(f.aux).terminal;
    return false;
}

bool JsonMatcher::in_plain_string() const {
    if (depth_ == 0) return false;
    const Frame& f = frames_[size_t(depth_ - 1)];
    if (f.phase != kStrBody || f.count != 0) return false;
    const JsonGrammar::Node& n = g_->node(f.node);
    return n.kind == JsonGrammar::Kind::String && n.max_length == UINT32_MAX;  // with a limit, text moves the count
}

JsonMatcher::Step JsonMatcher::step(Frame& f, uint8_t c) {
    if (f.phase == kStart) {
        // Exact text: no whitespace before it.
        const JsonGrammar::Kind kind = g_->node(f.node).kind;
        if (kind == JsonGrammar::Kind::Sequence) return f.phase = 1, f.aux = 0, f.count = 0, Step::Retry;
        if (kind == JsonGrammar::Kind::Choice) return f.phase = 1, f.aux = g_->node(f.node).literal_root, Step::Retry;
        return start_value(f, c);
    }
    switch (g_->node(f.node).kind) {
        case JsonGrammar::Kind::Object: return object(f, c);
        case JsonGrammar::Kind::Array: return array(f, c);
        case JsonGrammar::Kind::String: return string(f, c);
        case JsonGrammar::Kind::Number:
        case JsonGrammar::Kind::Integer: return number(f, c);
        case JsonGrammar::Kind::Literals: return literal(f, c);
        case JsonGrammar::Kind::Sequence: return sequence(f, c);
        case JsonGrammar::Kind::Choice: return choice(f, c);
        case JsonGrammar::Kind::Union: break;  // resolved when the value starts
    }
    return Step::Reject;
}

JsonMatcher::Step JsonMatcher::sequence(Frame& f, uint8_t c) {
    const JsonGrammar::Node& n = g_->node(f.node);
    if (f.aux >= n.parts.size()) return Step::Pass;
    const JsonGrammar::Node::Part& part = n.parts[f.aux];
    if (part.node != JsonGrammar::kNone) {
        ++f.aux, f.count = 0;
        return push(part.node) ? Step::Retry : Step::Reject;
    }
    if (f.count >= part.text.size() || uint8_t(part.text[f.count]) != c) return Step::Reject;
    if (++f.count == part.text.size()) ++f.aux, f.count = 0;
    if (f.aux == n.parts.size()) --depth_;
    return Step::Take;
}

JsonMatcher::Step JsonMatcher::choice(Frame& f, uint8_t c) {
    const uint32_t next = g_->literal_next(f.aux, c);
    if (next == JsonGrammar::kNone) return Step::Reject;
    const uint32_t option = g_->literal(next).option;
    if (option == JsonGrammar::kNone) return f.aux = next, Step::Take;
    // The text named its option: this frame goes on as that sequence.
    f.node = option, f.phase = 1, f.aux = 0, f.count = 0;
    if (g_->node(option).parts.empty()) --depth_;
    return Step::Take;
}

JsonMatcher::Step JsonMatcher::start_value(Frame& f, uint8_t c) {
    switch (gap(f.ws, c)) {
        case Gap::Took: return Step::Take;
        case Gap::Bad: return Step::Reject;
        case Gap::NotSpace: break;
    }
    const JsonGrammar::Node* n = &g_->node(f.node);
    if (n->kind == JsonGrammar::Kind::Union) {
        uint32_t alt = JsonGrammar::kNone;
        if (c == '{') alt = n->on_object;
        else if (c == '[') alt = n->on_array;
        else if (c == '"') alt = n->on_string;
        else if (c == '-' || is_digit(c)) alt = n->on_number;
        else if (c == 't' || c == 'f' || c == 'n') alt = n->on_literal;
        if (alt == JsonGrammar::kNone) return Step::Reject;
        f.node = alt;
        n = &g_->node(alt);
    }
    f.ws = 0;
    switch (n->kind) {
        case JsonGrammar::Kind::Object:
            if (c != '{') return Step::Reject;
            f.phase = kObjOpen, f.aux = 0;
            return Step::Take;
        case JsonGrammar::Kind::Array:
            if (c != '[') return Step::Reject;
            f.phase = kArrOpen, f.aux = 0;
            return Step::Take;
        case JsonGrammar::Kind::String:
            if (c != '"') return Step::Reject;
            f.phase = kStrBody, f.count = 0, f.keys = 0;
            return Step::Take;
        case JsonGrammar::Kind::Number:
        case JsonGrammar::Kind::Integer:
            if (c == '-') f.phase = kNumMinus;
            else if (c == '0') f.phase = kNumZero;
            else if (is_digit(c)) f.phase = kNumInt, f.count = 1;
            else return Step::Reject;
            return Step::Take;
        case JsonGrammar::Kind::Sequence:
        case JsonGrammar::Kind::Choice: break;  // step() starts them
        case JsonGrammar::Kind::Literals: {
            const uint32_t next = g_->literal_next(n->literal_root, c);
            if (next == JsonGrammar::kNone) return Step::Reject;
            f.phase = kLitIn, f.aux = next;
            if (g_->literal(next).next.empty()) --depth_;  // a whole literal nothing can extend
            return Step::Take;
        }
        case JsonGrammar::Kind::Union: break;
    }
    return Step::Reject;
}

bool JsonMatcher::start_key(Frame& f) {
    const JsonGrammar::Node& n = g_->node(f.node);
    uint64_t keys = 0;
    for (size_t p = f.aux; p < n.properties.size(); ++p) {
        keys |= uint64_t(1) << p;
        if (n.properties[p].required) break;
    }
    if (keys == 0) return false;
    f.phase = kObjKey, f.ws = 0, f.count = 0, f.keys = keys;
    return true;
}

JsonMatcher::Step JsonMatcher::object(Frame& f, uint8_t c) {
    const JsonGrammar::Node& n = g_->node(f.node);
    const auto remaining_required = [&] {
        for (size_t p = f.aux; p < n.properties.size(); ++p)
            if (n.properties[p].required) return true;
        return false;
    };
    if (f.phase == kObjKey) {
        uint64_t keys = f.keys;
        uint32_t whole = JsonGrammar::kNone;
        for (uint64_t rest = keys; rest; rest &= rest - 1) {
            const int p = __builtin_ctzll(rest);
            const std::string& key = n.properties[size_t(p)].key;
            if (f.count >= key.size() || uint8_t(key[f.count]) != c) keys &= ~(uint64_t(1) << p);
            else if (f.count + 1u == key.size()) whole = uint32_t(p);
        }
        if (keys == 0) return Step::Reject;
        f.keys = keys, ++f.count;
        if (whole != JsonGrammar::kNone) f.phase = kObjColon, f.ws = 0, f.aux = whole + 1;
        return Step::Take;
    }
    switch (gap(f.ws, c)) {
        case Gap::Took: return Step::Take;
        case Gap::Bad: return Step::Reject;
        case Gap::NotSpace: break;
    }
    switch (f.phase) {
        case kObjOpen:
        case kObjAfterComma:
            if (c == '"') {
                if (n.free_keys) {
                    f.phase = kObjColon, f.ws = 0;
                    if (!push(g_->node(g_->any()).on_string)) return Step::Reject;
                    frames_[size_t(depth_ - 1)].phase = kStrBody;  // keys is 0: no characters yet
                    return Step::Take;
                }
                return start_key(f) ? Step::Take : Step::Reject;
            }
            if (c == '}' && f.phase == kObjOpen && (n.free_keys || !remaining_required())) return --depth_, Step::Take;
            return Step::Reject;
        case kObjColon: {
            if (c != ':') return Step::Reject;
            f.phase = kObjAfterValue, f.ws = 0;
            const uint32_t value = n.free_keys ? g_->any() : n.properties[f.aux - 1].node;
            return push(value) ? Step::Take : Step::Reject;
        }
        case kObjAfterValue:
            if (c == ',' && (n.free_keys || f.aux < n.properties.size())) return f.phase = kObjAfterComma, f.ws = 0, Step::Take;
            if (c == '}' && (n.free_keys || !remaining_required())) return --depth_, Step::Take;
            return Step::Reject;
    }
    return Step::Reject;
}

JsonMatcher::Step JsonMatcher::array(Frame& f, uint8_t c) {
    const JsonGrammar::Node& n = g_->node(f.node);
    switch (gap(f.ws, c)) {
        case Gap::Took: return Step::Take;
        case Gap::Bad: return Step::Reject;
        case Gap::NotSpace: break;
    }
    switch (f.phase) {
        case kArrOpen:
            if (c == ']') return n.min_items == 0 ? (--depth_, Step::Take) : Step::Reject;
            if (n.max_items == 0) return Step::Reject;
            f.phase = kArrAfterValue, f.ws = 0, f.aux = 1;
            return push(n.items) ? Step::Retry : Step::Reject;
        case kArrAfterValue:
            if (c == ',' && f.aux < n.max_items) return f.phase = kArrAfterComma, f.ws = 0, Step::Take;
            if (c == ']' && f.aux >= n.min_items) return --depth_, Step::Take;
            return Step::Reject;
        case kArrAfterComma:
            f.phase = kArrAfterValue, f.ws = 0, ++f.aux;
            return push(n.items) ? Step::Retry : Step::Reject;
    }
    return Step::Reject;
}

JsonMatcher::Step JsonMatcher::string(Frame& f, uint8_t c) {
    const JsonGrammar::Node& n = g_->node(f.node);
    switch (f.phase) {
        case kStrBody:
            if (f.count > 0) {  // inside a UTF-8 character: aux is the next byte's range
                if (c < (f.aux >> 8) || c > (f.aux & 0xFF)) return Step::Reject;
                --f.count, f.aux = 0x80BF;
                return Step::Take;
            }
            if (c == '"') return f.keys < n.min_length ? Step::Reject : (--depth_, Step::Take);
            if (c < 0x20) return Step::Reject;
            // Every other byte here begins a character: an escape, ASCII or a UTF-8 lead byte.
            if (f.keys >= n.max_length) return Step::Reject;
            ++f.keys;
            if (c == '\\') return f.phase = kStrEscape, Step::Take;
            if (c < 0x80) return Step::Take;
            // The lead byte says how many continuation bytes follow and, for the first, which
            // range keeps the character shortest-form and outside the surrogates.
            if (c >= 0xC2 && c <= 0xDF) f.count = 1, f.aux = 0x80BF;
            else if (c == 0xE0) f.count = 2, f.aux = 0xA0BF;
            else if (c == 0xED) f.count = 2, f.aux = 0x809F;
            else if (c >= 0xE1 && c <= 0xEF) f.count = 2, f.aux = 0x80BF;
            else if (c == 0xF0) f.count = 3, f.aux = 0x90BF;
            else if (c >= 0xF1 && c <= 0xF3) f.count = 3, f.aux = 0x80BF;
            else if (c == 0xF4) f.count = 3, f.aux = 0x808F;
            else return Step::Reject;
            return Step::Take;
        case kStrEscape:
            if (c == 'u') return f.phase = kStrHex, f.count = 4, f.aux = 0, Step::Take;
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
                return f.phase = kStrBody, Step::Take;
            return Step::Reject;
        case kStrHex:
        case kStrPairHex: {
            if (!is_hex(c)) return Step::Reject;
            f.aux = f.aux * 16 + hex_value(c);
            --f.count;
            const bool low = f.aux >= 0xDC && f.aux <= 0xDF;  // after two digits: the code unit's high byte
            if (f.count == 2 && low != (f.phase == kStrPairHex)) return Step::Reject;
            if (f.count > 0) return Step::Take;
            f.phase = f.phase == kStrHex && f.aux >= 0xD800 && f.aux <= 0xDBFF ? kStrPairBackslash : kStrBody;
            return Step::Take;
        }
        case kStrPairBackslash:
            return c == '\\' ? (f.phase = kStrPairU, Step::Take) : Step::Reject;
        case kStrPairU:
            return c == 'u' ? (f.phase = kStrPairHex, f.count = 4, f.aux = 0, Step::Take) : Step::Reject;
    }
    return Step::Reject;
}

JsonMatcher::Step JsonMatcher::number(Frame& f, uint8_t c) {
    const bool integer = g_->node(f.node).kind == JsonGrammar::Kind::Integer;
    const bool digit = is_digit(c);
    switch (f.phase) {
        case kNumMinus:
            if (c == '0') return f.phase = kNumZero, Step::Take;
            if (digit) return f.phase = kNumInt, f.count = 1, Step::Take;
            return Step::Reject;
        case kNumZero:
        case kNumInt:
            if (digit) {
                if (f.phase == kNumZero || f.count >= kMaxDigits) return Step::Reject;
                return ++f.count, Step::Take;
            }
            if (!integer && c == '.') return f.phase = kNumDot, Step::Take;
            if (!integer && (c == 'e' || c == 'E')) return f.phase = kNumE, Step::Take;
            return Step::Pass;
        case kNumDot:
            if (digit) return f.phase = kNumFrac, f.count = 1, Step::Take;
            return Step::Reject;
        case kNumFrac:
            if (digit) return f.count >= kMaxDigits ? Step::Reject : (++f.count, Step::Take);
            if (c == 'e' || c == 'E') return f.phase = kNumE, Step::Take;
            return Step::Pass;
        case kNumE:
            if (c == '+' || c == '-') return f.phase = kNumESign, Step::Take;
            [[fallthrough]];
        case kNumESign:
            if (digit) return f.phase = kNumExp, f.count = 1, Step::Take;
            return Step::Reject;
        case kNumExp:
            if (digit) return f.count >= kMaxExponentDigits ? Step::Reject : (++f.count, Step::Take);
            return Step::Pass;
    }
    return Step::Reject;
}

JsonMatcher::Step JsonMatcher::literal(Frame& f, uint8_t c) {
    const uint32_t next = g_->literal_next(f.aux, c);
    if (next != JsonGrammar::kNone) {
        f.aux = next;
        if (g_->literal(next).next.empty()) --depth_;
        return Step::Take;
    }
    return g_->literal(f.aux).terminal ? Step::Pass : Step::Reject;
}

}  // namespace anvil::engine
