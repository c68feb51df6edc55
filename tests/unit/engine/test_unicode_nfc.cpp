// Unicode NFC: known pairs worked out from the standard, then every code point and thousands of
// random strings of marks, jamo and composites against Python's unicodedata.normalize.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "engine/tokenizer.hpp"
#include "engine/unicode.hpp"
#include "engine/unicode_nfc.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;

namespace {

std::string utf8(std::initializer_list<uint32_t> cps) {
    std::string out;
    for (uint32_t cp : cps) append_utf8(out, cp);
    return out;
}

std::vector<uint32_t> parse_hex(const std::string& field) {
    std::vector<uint32_t> out;
    std::istringstream in(field);
    std::string word;
    while (in >> word) out.push_back(uint32_t(std::stoul(word, nullptr, 16)));
    return out;
}

std::string utf8(const std::vector<uint32_t>& cps) {
    std::string out;
    for (uint32_t cp : cps) append_utf8(out, cp);
    return out;
}

// Python prints "input|expected" lines of hex code points: every single code point NFC changes,
// then random strings drawn from the characters NFC cares about.
constexpr const char* kPythonCases = R"PY(
import random, unicodedata
def hexs(s): return " ".join("%X" % ord(c) for c in s)
print("version", unicodedata.unidata_version)
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF: continue
    c = chr(cp)
    n = unicodedata.normalize("NFC", c)
    if n != c: print(hexs(c) + "|" + hexs(n))
print("strings")
pool = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and (unicodedata.combining(chr(cp))
        or (unicodedata.decomposition(chr(cp)) and not unicodedata.decomposition(chr(cp)).startswith("<")))]
pool += list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A7, 0x11C3))
pool += [0xAC00, 0xAC01, 0xAC1C, 0xD788, 0xD7A3] + [ord(c) for c in "aeiouAEIOUnNcCsS "] * 20
seconds = sorted({int(unicodedata.decomposition(chr(cp)).split()[1], 16) for cp in range(0x110000)
                  if not 0xD800 <= cp <= 0xDFFF and len(unicodedata.decomposition(chr(cp)).split()) == 2
                  and not unicodedata.decomposition(chr(cp)).startswith("<")})
pool += seconds * 3
rng = random.Random(20261130)
for _ in range(6000):
    s = "".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 10)))
    print(hexs(s) + "|" + hexs(unicodedata.normalize("NFC", s)))
)PY";

}  // namespace

TEST_CASE("NFC composes, reorders and keeps exclusions decomposed", "[tokenizer][nfc]") {
    CHECK(nfc_normalize(utf8({'e', 0x301})) == utf8({0xE9}));
    CHECK(nfc_normalize(utf8({0xE9})) == utf8({0xE9}));
    // Å three ways: A + ring, the precomposed letter, and the ANGSTROM SIGN singleton.
    CHECK(nfc_normalize(utf8({'A', 0x30A})) == utf8({0xC5}));
    CHECK(nfc_normalize(utf8({0xC5})) == utf8({0xC5}));
    CHECK(nfc_normalize(utf8({0x212B})) == utf8({0xC5}));
    CHECK(nfc_normalize(utf8({0x2126})) == utf8({0x3A9}));  // OHM SIGN -> GREEK CAPITAL OMEGA
    // Hangul: L V -> LV, L V T -> LVT, LV + T -> LVT; a syllable stays.
    CHECK(nfc_normalize(utf8({0x1100, 0x1161})) == utf8({0xAC00}));
    CHECK(nfc_normalize(utf8({0x1100, 0x1161, 0x11A8})) == utf8({0xAC01}));
    CHECK(nfc_normalize(utf8({0xAC00, 0x11A8})) == utf8({0xAC01}));
    CHECK(nfc_normalize(utf8({0xD55C})) == utf8({0xD55C}));
    // Composition exclusions stay decomposed: U+0958 DEVANAGARI QA, U+FB1F, U+2ADC.
    CHECK(nfc_normalize(utf8({0x958})) == utf8({0x915, 0x93C}));
    CHECK(nfc_normalize(utf8({0x915, 0x93C})) == utf8({0x915, 0x93C}));
    CHECK(nfc_normalize(utf8({0x2ADC})) == utf8({0x2ADD, 0x338}));
    // A non-starter decomposition: U+0344 COMBINING GREEK DIALYTIKA TONOS.
    CHECK(nfc_normalize(utf8({0x344})) == utf8({0x308, 0x301}));
    // Canonical ordering: dot below (220) moves before the acute (230), then both compose.
    CHECK(nfc_normalize(utf8({'a', 0x301, 0x323})) == utf8({0x1EA1, 0x301}));
    CHECK(nfc_normalize(utf8({'q', 0x307, 0x323})) == utf8({'q', 0x323, 0x307}));
    // Blocked: a mark of the same class between the starter and the mark.
    CHECK(nfc_normalize(utf8({'e', 0x302, 0x301})) == utf8({0x1EBF}));
    CHECK(nfc_normalize(utf8({'e', 0x304, 0x301})) == utf8({0x1E17}));  // ē, then ē + acute
    CHECK(nfc_normalize(utf8({'a', 0x346, 0x301})) == utf8({'a', 0x346, 0x301}));  // 0x346 blocks the acute
    // Marks at the start compose with nothing; invalid bytes pass through and block.
    CHECK(nfc_normalize(utf8({0x301, 'e'})) == utf8({0x301, 'e'}));
    CHECK(nfc_normalize("e\xFF\xCC\x81") == "e\xFF\xCC\x81");
    CHECK(nfc_normalize("") == "");
    CHECK(canonical_combining_class(0x301) == 230);
    CHECK(canonical_combining_class('a') == 0);
}

TEST_CASE("NFC is Unicode 9.0's, as Hugging Face tokenizers' is: later characters are left alone", "[tokenizer][nfc]") {
    CHECK(std::string(nfc_unicode_version()) == "9.0.0");
    CHECK(nfc_assigned('a'));
    CHECK(nfc_assigned(0x1F914));                // 🤔, Unicode 8.0
    CHECK_FALSE(nfc_assigned(0x11935));          // DIVES AKURU VOWEL SIGN E, Unicode 13.0
    // Unicode 13.0 composes U+11935 U+11930 into U+11938; 9.0 knows none of the three.
    CHECK(nfc_normalize(utf8({0x11935, 0x11930})) == utf8({0x11935, 0x11930}));
    CHECK(nfc_normalize(utf8({0x11938})) == utf8({0x11938}));
    CHECK(canonical_combining_class(0x1DFA) == 0);  // a combining mark of Unicode 14.0
    CHECK(canonical_combining_class(0x1DF5) == 230);  // one of Unicode 9.0
}

TEST_CASE("the NFC fast path knows ASCII and already-composed text need nothing", "[tokenizer][nfc]") {
    CHECK(nfc_inert("plain ASCII text\n"));
    CHECK(nfc_inert("caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD"));  // café 你好
    CHECK_FALSE(nfc_inert("cafe\xCC\x81"));
    CHECK_FALSE(nfc_inert(utf8({0x212B})));
}

TEST_CASE("NFC matches Python's unicodedata on every code point and on random strings", "[tokenizer][nfc]") {
    if (!std::filesystem::exists("/usr/bin/python3")) {
        WARN("SKIPPED: /usr/bin/python3 is missing; the NFC tables cannot be checked against unicodedata");
        return;
    }
    const auto result = anvil::test::run({"/usr/bin/python3", "-c", kPythonCases});
    REQUIRE(result.exit_code == 0);
    std::istringstream lines(result.output);
    std::string line;
    REQUIRE(std::getline(lines, line));
    if (line != std::string("version ") + nfc_source_version())
        WARN("Python's Unicode (" << line << ") differs from the data the tables were cut from (" << nfc_source_version()
                                  << "): regenerate with scripts/gen-unicode-nfc.py");
    // The tables are Unicode 9.0's NFC (Hugging Face tokenizers'): where Python's newer data meets a
    // character 9.0 did not assign, the two rightly differ, so such cases are left out.
    auto known = [](const std::vector<uint32_t>& cps) {
        return std::all_of(cps.begin(), cps.end(), [](uint32_t cp) { return nfc_assigned(cp); });
    };
    int skipped = 0;
    std::vector<bool> changes(0x110000, false);
    bool strings = false;
    int checked_strings = 0, mismatches = 0;
    while (std::getline(lines, line)) {
        if (line == "strings") {
            strings = true;
            continue;
        }
        const size_t bar = line.find('|');
        REQUIRE(bar != std::string::npos);
        const auto input = parse_hex(line.substr(0, bar));
        if (!known(input)) {
            skipped += strings;
            continue;
        }
        const std::string expected = utf8(parse_hex(line.substr(bar + 1)));
        const std::string text = utf8(input);
        if (!strings) changes[input.at(0)] = true;
        else ++checked_strings;
        const std::string got = nfc_normalize(text);
        if (got != expected && ++mismatches <= 10) FAIL_CHECK("NFC of " << line.substr(0, bar) << " should be " << line.substr(bar + 1));
        if (nfc_inert(text) && expected != text && mismatches++ < 10)
            FAIL_CHECK("the fast path calls " << line.substr(0, bar) << " inert but NFC changes it");
    }
    CHECK(checked_strings > 5000);  // of 6000
    CHECK(checked_strings + skipped == 6000);
    for (uint32_t cp = 0; cp < 0x110000; ++cp) {
        if (changes[cp] || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
        const std::string one = utf8({cp});
        if (nfc_normalize(one) != one && ++mismatches <= 10) FAIL_CHECK("NFC should keep U+" << std::hex << cp);
    }
    CHECK(mismatches == 0);
}

TEST_CASE("a tokenizer with an NFC normalizer encodes composed and decomposed text alike", "[tokenizer][nfc]") {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) {
        std::string ch;
        append_utf8(ch, byte_to_unicode(uint8_t(b)));
        vocab[ch] = b;
    }
    json doc = {{"normalizer", {{"type", "NFC"}}},
                {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
    const std::string composed = "caf\xC3\xA9", decomposed = "cafe\xCC\x81";
    {
        Tokenizer tok(doc, json::object(), "nfc");
        CHECK(tok.encode(decomposed) == tok.encode(composed));
        CHECK(tok.encode(utf8({0x212B})) == tok.encode(utf8({0xC5})));
    }
    {
        doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
        Tokenizer tok(doc, json::object(), "nfc-sequence");
        CHECK(tok.encode(decomposed) == tok.encode(composed));
    }
    {
        doc["normalizer"] = nullptr;
        Tokenizer tok(doc, json::object(), "none");
        CHECK(tok.encode(decomposed) != tok.encode(composed));
    }
    doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
    CHECK_THROWS_WITH(Tokenizer(doc, json::object(), "lower"),
                      Catch::Contains("normalizer Lowercase is not supported"));
    doc["normalizer"] = {{"type", "NFKC"}};
    CHECK_THROWS_WITH(Tokenizer(doc, json::object(), "nfkc"), Catch::Contains("normalizer NFKC is not supported"));
}
