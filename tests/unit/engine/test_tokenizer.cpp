// Byte-level BPE: pre-tokenizer splits, merges by rank, added tokens, streaming decode, and the
// tokenizer make-model writes. Expected ids are worked out by hand from the vocabularies here.
#include <catch2/catch.hpp>

#include "engine/chat_template.hpp"
#include "engine/gguf_sentencepiece.hpp"
#include "engine/make_model.hpp"
#include "engine/pretokenizer.hpp"
#include "engine/tokenizer.hpp"
#include "engine/unicode.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;
using anvil::test::TempDir;

namespace {

std::vector<std::string> pieces(const std::string& text, SplitPattern pattern) {
    std::vector<std::string> out;
    for (auto p : pretokenize(text, pattern)) out.emplace_back(p);
    return out;
}

std::string mapped(const std::string& bytes) {
    std::string out;
    for (unsigned char b : bytes) append_utf8(out, byte_to_unicode(b));
    return out;
}

// Vocabulary: byte b has id b; merges add ids from 256 in rank order.
json hand_tokenizer(const char* regex, bool ignore_merges, const std::vector<std::pair<std::string, std::string>>& merges,
                    const std::vector<std::pair<std::string, int>>& extra_vocab = {}) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[mapped(std::string(1, char(b)))] = b;
    json merge_list = json::array();
    int next = 256;
    for (const auto& [a, b] : merges) {
        merge_list.push_back(mapped(a) + " " + mapped(b));
        if (!vocab.contains(mapped(a + b))) vocab[mapped(a + b)] = next++;
    }
    for (const auto& [text, id] : extra_vocab) vocab[mapped(text)] = id;
    json pre = regex ? json{{"type", "Sequence"},
                            {"pretokenizers",
                             {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}
                     : json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    return {{"added_tokens", {{{"id", 300}, {"content", "<|im_end|>"}, {"special", true}}, {{"id", 301}, {"content", "<tool>"}, {"special", false}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer", pre},
            {"model", {{"type", "BPE"}, {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merge_list}}}};
}

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {" ", "w"}, {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"},  // 256..260: " world"
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},              // 261..264: "hello"
    {"1", "2"}, {"12", "3"},                                          // 265..266: "123"
    {"b", "c"}, {"a", "b"},                                           // 267..268: rank decides "abc"
};

const std::string kMixed = "hello world 12345 \xE4\xBD\xA0\xE5\xA5\xBD\xF0\x9F\x98\x80!!\n";  // ... 你好😀!!\n

}  // namespace

TEST_CASE("the Llama-3 pattern splits letters, 3-digit groups, punctuation runs, CJK and emoji", "[tokenizer]") {
    CHECK(pieces(kMixed, SplitPattern::Llama3) ==
          std::vector<std::string>{"hello", " world", " ", "123", "45", " \xE4\xBD\xA0\xE5\xA5\xBD", "\xF0\x9F\x98\x80!!\n"});
    CHECK(pieces("I'm DON'T they're", SplitPattern::Llama3) ==
          std::vector<std::string>{"I", "'m", " DON", "'T", " they", "'re"});
    CHECK(pieces("a  b\n\nc   ", SplitPattern::Llama3) == std::vector<std::string>{"a", " ", " b", "\n\n", "c", "   "});
    CHECK(pieces("x = f(y);\n  z", SplitPattern::Llama3) ==
          std::vector<std::string>{"x", " =", " f", "(y", ");\n", " ", " z"});
}

TEST_CASE("the Qwen2 pattern takes digits one at a time", "[tokenizer]") {
    CHECK(pieces("abc 12345", SplitPattern::Qwen2) == std::vector<std::string>{"abc", " ", "1", "2", "3", "4", "5"});
}

TEST_CASE("the GPT-2 pattern keeps a leading space on numbers and is case-sensitive on contractions", "[tokenizer]") {
    CHECK(pieces(kMixed, SplitPattern::Gpt2) ==
          std::vector<std::string>{"hello", " world", " 12345", " \xE4\xBD\xA0\xE5\xA5\xBD", "\xF0\x9F\x98\x80!!", "\n"});
    CHECK(pieces("DON'T don't", SplitPattern::Gpt2) == std::vector<std::string>{"DON", "'", "T", " don", "'t"});
}

TEST_CASE("pre-tokenizer pieces always concatenate back to the text", "[tokenizer]") {
    const std::string text = "Mixed: caf\xC3\xA9 \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \t\r\n 3.14 \xE2\x80\x94 \xFF\xFE bad bytes";
    for (auto pattern : {SplitPattern::Gpt2, SplitPattern::Llama3, SplitPattern::Qwen2}) {
        std::string joined;
        for (auto& p : pieces(text, pattern)) joined += p;
        CHECK(joined == text);
    }
}

TEST_CASE("BPE applies merges by rank and yields the hand-computed ids", "[tokenizer]") {
    Tokenizer tok(hand_tokenizer(kLlama3Pattern, false, kMerges), json::object(), "hand");
    // "hello" 264, " world" 260, " " 32, "123" 266, "45" 52 53, " 你好" as bytes, "😀!!\n" as bytes.
    CHECK(tok.encode(kMixed) == std::vector<int32_t>{264, 260, 32, 266, 52, 53, 32, 0xE4, 0xBD, 0xA0, 0xE5, 0xA5, 0xBD,
                                                     0xF0, 0x9F, 0x98, 0x80, 33, 33, 10});
    // "b c" outranks "a b": abc -> a + bc; ab alone -> ab.
    CHECK(tok.encode("abc") == std::vector<int32_t>{97, 267});
    CHECK(tok.encode("ab") == std::vector<int32_t>{268});
    CHECK(tok.decode(tok.encode(kMixed)) == kMixed);
}

TEST_CASE("added tokens are split out before pre-tokenizing and special ones vanish from decoded text", "[tokenizer]") {
    Tokenizer tok(hand_tokenizer(kLlama3Pattern, false, kMerges), json::object(), "hand");
    CHECK(tok.encode("hello<|im_end|> world<tool>") == std::vector<int32_t>{264, 300, 260, 301});
    CHECK(tok.decode({264, 300, 260, 301}) == "hello world<tool>");
    CHECK(tok.decode({264, 300, 260}, false) == "hello<|im_end|> world");
    CHECK(tok.is_special(300));
    CHECK_FALSE(tok.is_special(301));
}

TEST_CASE("ignore_merges takes a whole word straight from the vocabulary", "[tokenizer]") {
    // "hel" is in the vocabulary but no merge builds it from h+e+l.
    Tokenizer plain(hand_tokenizer(kLlama3Pattern, false, kMerges, {{"hel", 290}}), json::object(), "hand");
    Tokenizer direct(hand_tokenizer(kLlama3Pattern, true, kMerges, {{"hel", 290}}), json::object(), "hand");
    CHECK(plain.encode("hel") == std::vector<int32_t>{261, 108});
    CHECK(direct.encode("hel") == std::vector<int32_t>{290});
}

TEST_CASE("the GPT-2 ByteLevel pre-tokenizer is honoured", "[tokenizer]") {
    Tokenizer tok(hand_tokenizer(nullptr, false, kMerges), json::object(), "hand");
    CHECK(tok.encode(" 12345") == std::vector<int32_t>{32, 266, 52, 53});
}

TEST_CASE("streaming decode never emits half a UTF-8 character", "[tokenizer]") {
    Tokenizer tok(hand_tokenizer(kLlama3Pattern, false, kMerges), json::object(), "hand");
    StreamDecoder stream(tok);
    CHECK(stream.push(264) == "hello");
    CHECK(stream.push(0xF0).empty());
    CHECK(stream.push(0x9F).empty());
    CHECK(stream.push(0x98).empty());
    CHECK(stream.push(0x80) == "\xF0\x9F\x98\x80");
    CHECK(stream.push(0xE4).empty());
    CHECK(stream.push(300).empty());  // a special token adds nothing
    CHECK(stream.finish() == "\xEF\xBF\xBD");  // the unfinished character becomes U+FFFD at the end
}

TEST_CASE("tokenizer.json problems are refused with the reason", "[tokenizer]") {
    auto doc = hand_tokenizer("\\w+", false, kMerges);
    CHECK_THROWS_WITH(Tokenizer(doc, json::object(), "t.json"), Catch::Contains("pattern") && Catch::Contains("GPT-2"));
    doc = hand_tokenizer(kLlama3Pattern, false, kMerges);
    doc["model"]["merges"].push_back("zz qq");
    CHECK_THROWS_WITH(Tokenizer(doc, json::object(), "t.json"), Catch::Contains("missing from the vocabulary"));
    doc = hand_tokenizer(kLlama3Pattern, false, kMerges);
    doc["model"]["byte_fallback"] = true;
    CHECK_THROWS_WITH(Tokenizer(doc, json::object(), "t.json"),
                      Catch::Contains("t.json: model.byte_fallback is set with a ByteLevel pre_tokenizer"));
}

TEST_CASE("make-model's tokenizers round-trip text and add their begin-of-text token", "[tokenizer]") {
    const std::string text = "Hello world! 1234567 caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80\n\tdef f(x): return x";
    for (std::string arch : {"llama", "qwen2", "mistral"}) {
        INFO(arch);
        TempDir dir;
        make_model({dir / "m", "tiny", arch, "f32", 1, 1});
        const Tokenizer tok = Tokenizer::load(dir / "m");
        const auto ids = tok.encode(text);
        CHECK(ids.size() < text.size());  // merges were learned and used
        CHECK(tok.decode(ids) == text);
        const auto with_special = tok.encode(text, true);
        if (arch == "qwen2") {
            CHECK(with_special == ids);
        } else {
            REQUIRE(with_special.size() == ids.size() + 1);
            CHECK(with_special[0] == *tok.token_id(tok.bos_token()));
        }
    }
}

TEST_CASE("an NFC tokenizer (Qwen2's) normalises text before encoding it", "[tokenizer][nfc]") {
    TempDir dir;
    make_model({dir / "m", "tiny", "qwen2", "f32", 1, 1});
    const Tokenizer tok = Tokenizer::load(dir / "m");
    // e + combining acute encodes as the precomposed é does.
    CHECK(tok.encode("cafe\xCC\x81 ok") == tok.encode("caf\xC3\xA9 ok"));
    CHECK(tok.encode("<|im_start|>cafe\xCC\x81") == tok.encode("<|im_start|>caf\xC3\xA9"));
}

TEST_CASE("chat templates render chatml, Llama-3 and Mistral prompts", "[tokenizer][chat]") {
    const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello."}, {"user", "Bye"}};
    TempDir dir;
    make_model({dir / "llama", "tiny", "llama", "f32", 1, 1});
    make_model({dir / "qwen", "tiny", "qwen2", "f32", 1, 1});
    make_model({dir / "mistral", "tiny", "mistral", "f32", 1, 1});
    auto llama = ChatTemplate::detect(Tokenizer::load(dir / "llama"));
    auto qwen = ChatTemplate::detect(Tokenizer::load(dir / "qwen"));
    auto mistral = ChatTemplate::detect(Tokenizer::load(dir / "mistral"));
    CHECK(llama.family() == ChatFamily::Llama3);
    CHECK(llama.render(chat) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
          "Hello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK(qwen.family() == ChatFamily::ChatMl);
    CHECK(qwen.render(chat) ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
          "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    CHECK(mistral.family() == ChatFamily::Mistral);
    CHECK(mistral.render(chat) == "<s>[INST] Be brief.\n\n Hi  [/INST]Hello.</s>[INST] Bye [/INST]");
    CHECK_THROWS_WITH(mistral.render({{"user", "a"}, {"user", "b"}}), Catch::Contains("alternate"));
    CHECK_THROWS_WITH(qwen.render({{"function", "x"}}), Catch::Contains("role 'function'"));  // OpenAI's old role; tool replaced it
    // The special tokens of a rendered prompt become single ids.
    const Tokenizer qwen_tok = Tokenizer::load(dir / "qwen");
    const auto ids = qwen_tok.encode(qwen.render({{"user", "Hi"}}));
    CHECK(ids.front() == *qwen_tok.token_id("<|im_start|>"));
}

TEST_CASE("a chat template of no known family is refused with what to do instead", "[tokenizer][chat]") {
    json config = {{"chat_template", "{% for m in messages %}<<{{ m.content }}>>{% endfor %}"}};
    Tokenizer tok(hand_tokenizer(kLlama3Pattern, false, kMerges), config, "hand");
    CHECK_THROWS_WITH(ChatTemplate::detect(tok), Catch::Contains("/v1/completions"));
    Tokenizer none(hand_tokenizer(kLlama3Pattern, false, kMerges), json::object(), "hand");
    CHECK_THROWS_WITH(ChatTemplate::detect(none), Catch::Contains("no chat_template"));
}

namespace {

const std::string kMeta = "\xE2\x96\x81";  // U+2581, the metaspace

// A SentencePiece-style vocabulary as Mistral 7B's tokenizer.json writes one: <unk> <s> </s>, the
// 256 <0xXX> byte tokens (ids 3..258), then "▁" 259, "a" 260, "b" 261, "c" 262 and the merges'
// tokens: "ab" 263, "▁ab" 264, "bc" 265. "a b" outranks "▁ ab", which outranks "b c".
json sentencepiece_tokenizer(const json& normalizer, const json& pre, const json& decoder, bool byte_fallback = true) {
    json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
    for (int b = 0; b < 256; ++b) vocab[byte_token_name(uint8_t(b))] = 3 + b;
    vocab[kMeta] = 259;
    vocab["a"] = 260;
    vocab["b"] = 261;
    vocab["c"] = 262;
    vocab["ab"] = 263;
    vocab[kMeta + "ab"] = 264;
    vocab["bc"] = 265;
    json added = json::array();
    for (int id : {0, 1, 2}) added.push_back({{"id", id}, {"content", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"}, {"special", true}});
    return {{"added_tokens", added},
            {"normalizer", normalizer},
            {"pre_tokenizer", pre},
            {"decoder", decoder},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
              {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
            {"model",
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"fuse_unk", true},
              {"byte_fallback", byte_fallback},
              {"vocab", vocab},
              {"merges", {"a b", kMeta + " ab", "b c"}}}}};
}

// Llama 2's and Mistral 7B's: the normalizer writes the metaspace, the decoder undoes it.
const json kLegacyNormalizer = {{"type", "Sequence"},
                                {"normalizers",
                                 {{{"type", "Prepend"}, {"prepend", kMeta}},
                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}};
const json kLegacyDecoder = {{"type", "Sequence"},
                             {"decoders",
                              {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}},
                               {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};

json metaspace(const std::string& scheme, bool split) {
    return {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", scheme}, {"split", split}};
}

}  // namespace

TEST_CASE("SentencePiece-style BPE merges characters by rank after the normalizer writes the metaspace", "[tokenizer][sentencepiece]") {
    const Tokenizer tok(sentencepiece_tokenizer(kLegacyNormalizer, nullptr, kLegacyDecoder), json::object(), "sp");
    CHECK(tok.form() == VocabForm::SentencePiece);
    CHECK(tok.adds_space_prefix());
    CHECK(tok.encode("ab") == std::vector<int32_t>{264});        // ▁ a b -> ▁ ab -> ▁ab
    CHECK(tok.encode("abc") == std::vector<int32_t>{264, 262});  // a b outranks b c
    CHECK(tok.encode("bc") == std::vector<int32_t>{259, 265});
    CHECK(tok.encode("ab ab") == std::vector<int32_t>{264, 264});
    CHECK(tok.encode("ab", true) == std::vector<int32_t>{1, 264});
    // Every piece between added tokens gets the metaspace, as Hugging Face's legacy Llama does.
    CHECK(tok.encode("ab<s>ab</s>") == std::vector<int32_t>{264, 1, 264, 2});
    // A character the vocabulary lacks falls back to its UTF-8 bytes.
    CHECK(tok.encode("\xC3\xA9") == std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9});
    CHECK(tok.encode("a\n") == std::vector<int32_t>{259, 260, 3 + '\n'});
    // Decoding turns the metaspace back into a space, bytes into bytes, and drops the leading space.
    CHECK(tok.token_bytes(264) == " ab");
    CHECK(tok.token_bytes(3 + 0xC3) == "\xC3");
    CHECK(tok.decode({1, 264, 264, 3 + 0xC3, 3 + 0xA9}) == "ab ab\xC3\xA9");
    CHECK(tok.decode({1, 264}, false) == "<s> ab");
    for (const std::string text : {"ab c  abc", " ab", "c\xC3\xA9\n\ta", "abc</s>"}) CHECK(tok.decode(tok.encode(text), false) == text);
    CHECK(tok.token_id("ab") == 263);
    CHECK(tok.token_id("<s>") == 1);
}

TEST_CASE("without byte fallback a SentencePiece-style vocabulary spells unknown characters as <unk>", "[tokenizer][sentencepiece]") {
    auto doc = sentencepiece_tokenizer(kLegacyNormalizer, nullptr, kLegacyDecoder, false);
    const Tokenizer fused(doc, json::object(), "sp");
    CHECK(fused.encode("a\xC3\xA9\xC3\xA8") == std::vector<int32_t>{259, 260, 0});  // one <unk> for the run
    doc["model"]["fuse_unk"] = false;
    const Tokenizer apart(doc, json::object(), "sp");
    CHECK(apart.encode("a\xC3\xA9\xC3\xA8") == std::vector<int32_t>{259, 260, 0, 0});
}

TEST_CASE("the Metaspace pre-tokenizer prepends as its scheme says and splits before runs of metaspaces", "[tokenizer][sentencepiece]") {
    const json decoder = {{"type", "Sequence"},
                          {"decoders", {{{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}}, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
    const Tokenizer first(sentencepiece_tokenizer(nullptr, metaspace("first", false), decoder), json::object(), "sp");
    const Tokenizer always(sentencepiece_tokenizer(nullptr, metaspace("always", false), decoder), json::object(), "sp");
    const Tokenizer never(sentencepiece_tokenizer(nullptr, metaspace("never", true), decoder), json::object(), "sp");
    CHECK(first.encode("ab<s>ab") == std::vector<int32_t>{264, 1, 263});  // only the text's start
    CHECK(always.encode("ab<s>ab") == std::vector<int32_t>{264, 1, 264});
    CHECK(never.encode("ab<s>ab") == std::vector<int32_t>{263, 1, 263});
    CHECK(always.encode(" ab") == std::vector<int32_t>{264});  // no second metaspace before one already there
    CHECK_FALSE(never.adds_space_prefix());
    // split: "ab▁▁ab" is "ab" and "▁▁ab"; the run of metaspaces stays together.
    CHECK(never.encode("ab  ab") == std::vector<int32_t>{263, 259, 264});
    CHECK(first.decode(first.encode("ab  ab")) == "ab  ab");
}

TEST_CASE("SentencePiece-style tokenizer.json problems are refused with the reason", "[tokenizer][sentencepiece]") {
    auto refused = [](json doc, const std::string& expected) {
        CHECK_THROWS_WITH(Tokenizer(doc, json::object(), "t.json"), Catch::Contains("t.json: " + expected));
    };
    auto doc = sentencepiece_tokenizer(kLegacyNormalizer, nullptr, kLegacyDecoder);
    doc["model"]["vocab"].erase("<0x41>");
    refused(doc, "model.byte_fallback is set but the vocabulary lacks <0x41>");
    refused(sentencepiece_tokenizer(kLegacyNormalizer, nullptr, nullptr), "decoder is missing");
    refused(sentencepiece_tokenizer(nullptr, nullptr, kLegacyDecoder), "neither a ByteLevel pre_tokenizer, a Metaspace one, nor a normalizer");
    refused(sentencepiece_tokenizer({{"type", "NFKC"}}, nullptr, kLegacyDecoder), "normalizer NFKC is not supported");
    refused(sentencepiece_tokenizer(kLegacyNormalizer, {{"type", "Whitespace"}}, kLegacyDecoder), "pre_tokenizer Whitespace is not supported");
    refused(sentencepiece_tokenizer(nullptr, metaspace("sometimes", false), kLegacyDecoder),
            "pre_tokenizer.prepend_scheme is \"sometimes\": expected always, first or never");
    refused(sentencepiece_tokenizer(kLegacyNormalizer, nullptr, {{"type", "WordPiece"}}), "decoder WordPiece is not supported");
    doc = sentencepiece_tokenizer(kLegacyNormalizer, nullptr, kLegacyDecoder);
    doc["model"]["unk_token"] = "<missing>";
    refused(doc, "model.unk_token \"<missing>\" is not in the vocabulary");
    doc = sentencepiece_tokenizer(kLegacyNormalizer, nullptr, kLegacyDecoder);
    doc["model"]["merge_ranks"] = {0};
    refused(doc, "model.merge_ranks must hold one rank per merge");
}

TEST_CASE("make-model's SentencePiece tokenizer round-trips text and falls back to bytes", "[tokenizer][sentencepiece]") {
    TempDir dir;
    make_model({dir / "m", "tiny", "mistral", "f32", 1, 1, 0, 0, "sentencepiece"});
    const Tokenizer tok = Tokenizer::load(dir / "m");
    CHECK(tok.form() == VocabForm::SentencePiece);
    const std::string text = "Hello world! The quick brown fox 1234 caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80\n\tdef f(x):";
    const auto ids = tok.encode(text, true);
    CHECK(ids.front() == 1);
    CHECK(ids.size() < text.size());  // merges were learned and used
    CHECK(tok.decode(ids) == text);
    CHECK(tok.encode("\xF0\x9F\x98\x80") == std::vector<int32_t>{*tok.token_id(kMeta), 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80});
    CHECK(ChatTemplate::detect(tok).family() == ChatFamily::Mistral);
    CHECK_THROWS_WITH(make_model({dir / "q", "tiny", "qwen2", "f32", 1, 1, 0, 0, "sentencepiece"}), Catch::Contains("--arch mistral"));
}

TEST_CASE("a GGUF llama vocabulary merges by score, leftmost first on a tie, as llama.cpp's SPM tokenizer", "[tokenizer][sentencepiece][gguf]") {
    SentencePieceVocab v;
    auto add = [&](const std::string& text, float score, int type) {
        v.tokens.push_back(text);
        v.scores.push_back(score);
        v.types.push_back(type);
        return int32_t(v.tokens.size() - 1);
    };
    add("<unk>", 0, kTokenUnknown);
    add("<s>", 0, kTokenControl);
    add("</s>", 0, kTokenControl);
    for (int b = 0; b < 256; ++b) add(byte_token_name(uint8_t(b)), 0, kTokenByte);
    const int32_t meta = add(kMeta, -100, kTokenNormal), a = add("a", -100, kTokenNormal), b = add("b", -100, kTokenNormal);
    const int32_t ab = add("ab", -1, kTokenNormal), ba = add("ba", -1, kTokenNormal), meta_a = add(kMeta + "a", -5, kTokenNormal);
    v.unknown = 0;
    json doc = sentencepiece_tokenizer_json(v);
    doc["post_processor"] = nullptr;
    const Tokenizer tok(doc, json::object(), "gguf");
    CHECK(tok.encode("aba") == std::vector<int32_t>{meta, ab, a});  // ab and ba tie: the leftmost merges
    CHECK(tok.encode("bab") == std::vector<int32_t>{meta, ba, b});
    CHECK(tok.encode("ab") == std::vector<int32_t>{meta, ab});      // ab (-1) before ▁a (-5)
    CHECK(tok.encode("a") == std::vector<int32_t>{meta_a});
    CHECK(tok.encode("a<unk>") == std::vector<int32_t>{meta_a, 0});  // llama.cpp matches <unk> in the text
    CHECK(tok.encode("\xC3\xA9") == std::vector<int32_t>{meta, 3 + 0xC3, 3 + 0xA9});
    CHECK(tok.decode({meta_a, ab}) == "aab");
    v.add_space_prefix = false;
    doc = sentencepiece_tokenizer_json(v);
    const Tokenizer bare(doc, json::object(), "gguf");
    CHECK(bare.encode("a b") == std::vector<int32_t>{a, meta, b});
    CHECK(bare.decode({meta_a}) == " a");  // nothing was prepended, so nothing is stripped
}

TEST_CASE("letters and numbers are Unicode 16.0's, as Hugging Face tokenizers' pre-tokenizer regexes see them", "[tokenizer]") {
    CHECK(std::string(unicode_tables::kLettersVersion) == "16.0.0");
    CHECK(is_letter(0x11F04));   // KAWI LETTER A, Unicode 15.0
    CHECK(is_letter(0x2EBF0));   // a CJK Extension I ideograph, Unicode 15.1
    CHECK(is_letter(0x10D4A));   // a GARAY letter, Unicode 16.0
    CHECK(is_number(0x1E4F0));   // NAG MUNDARI DIGIT ZERO, Unicode 15.0
    CHECK(is_number(0x16130));   // GURUNG KHEMA DIGIT ZERO, Unicode 16.0
    CHECK_FALSE(is_letter(0x11F00));  // a Kawi combining mark
    CHECK_FALSE(is_letter(0x10940));  // Unicode 17.0 (Sidetic): not yet
    // So a word in a script added since 14.0 is one piece, not a run of punctuation pieces.
    CHECK(pieces("\xF0\x90\xB5\x8A\xF0\x90\xB5\x8B x", SplitPattern::Llama3).size() == 2);
}

TEST_CASE("a Llama-2-chat template renders its <<SYS>> block and BOS per turn, and refuses tools", "[tokenizer][chat]") {
    // The template's own words, as meta-llama/Llama-2-7b-chat-hf publishes it (abridged).
    const json config = {{"bos_token", "<s>"},
                         {"eos_token", "</s>"},
                         {"chat_template",
                          "{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}{% endif %}"
                          "{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}"
                          "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% endif %}"
                          "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
                          "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"}};
    const Tokenizer tok(sentencepiece_tokenizer(kLegacyNormalizer, nullptr, kLegacyDecoder), config, "llama2");
    const auto chat = ChatTemplate::detect(tok);
    CHECK(chat.family() == ChatFamily::Llama2);
    CHECK(chat.render({{"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello."}, {"user", "Bye"}}) ==
          "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello. </s><s>[INST] Bye [/INST]");
    CHECK(chat.render({{"user", "Hi"}}) == "<s>[INST] Hi [/INST]");
    CHECK(chat.end_of_turn() == std::vector<std::string>{"</s>"});
    CHECK_THROWS_WITH(chat.render({{"user", "a"}, {"user", "b"}}), Catch::Contains("alternate"));
    ToolRequest tools;
    tools.tools.push_back({"get_weather", "", nlohmann::ordered_json::object()});
    tools.choice = ToolChoice::Auto;
    CHECK_THROWS_WITH(chat.render({{"user", "Hi"}}, &tools), Catch::Contains("no tool-call format"));
}
