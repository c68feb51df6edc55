// The strings the tokenizer agreement checks encode: hand-picked edge cases, then random
// compositions of fragments in many scripts, spacing and punctuation, the same for every run.
const kCases = [
  "", " ", "  ", "\n", "\t", "Hello world", " Hello", "Hello ", "  leading", "trailing  ", "x", "a b  c   d",
  "Hello world! How are you today?", "The quick brown fox jumps over the lazy dog.",
  "def f(x):\n    return x**2  # comment\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
  "日本語のテキスト", "中文文本和标点。", "한국어 텍스트", "مرحبا بالعالم", "Привет, мир!", "Ελληνικά γράμματα",
  "हिन्दी पाठ", "ไทย ข้อความ", "עברית", "Ünïcödé façade naïve café", "e\u0301 vs \u00e9", "Ａｂｃ full width",
  "😀🎉👍🏽 emoji 👨‍👩‍👧", "🇩🇪🇯🇵 flags", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "\u{2EBF0}\u{31350} CJK extensions", "\u{11F04}\u{1E4D0}\u{10D4A} new scripts",
  "1234567890 3.14159 1,000,000 -42 +7 1e-5", "0x1F 0b1010 0o17", "<0x0A> written out", "\u0000\u0001\u001f control",
  "\u00a0no-break\u2009thin\u3000ideographic space", "\r\n windows \r mac", "tabs\t\tand\vvertical\fform",
  "\u2581 a metaspace in the text \u2581\u2581", "____ underscores ____", "...!!!???", "''quotes'' \"double\" «guillemets»",
  "don't we'll I'm they're it's", "URL: https://example.com/path?q=1&r=2#frag", "email@example.org",
  "\ufffd replacement \ufeff bom", "\u200b zero width \u200d joiner", "a\u0300\u0301\u0302 stacked marks",
];

const kFragments = [
  "the", "quick", "brown", "fox", "Hello", "world", "token", "izer", "model", "GPU", "llama", "Mistral", "ing", "tion",
  "日本", "語", "中文", "한국", "мир", "Привет", "γειά", "café", "naïve", "Ü", "ß", "ø", "€", "£", "¥", "©", "™",
  "😀", "🎉", "👍🏽", "🇯🇵", "𝔘", "\u{2EBF0}", "\u{1F9EA}", "\u0301", "\u200d",
  "0", "7", "42", "123", "2024", "3.14", "1,000", "-", "+", "=", "==", "->", "=>", "::", "//", "/*", "*/",
  "(", ")", "[", "]", "{", "}", "<", ">", "</", "/>", "<s>", "</s>", "<unk>", "[INST]", "[/INST]",
  ".", ",", ";", ":", "!", "?", "'", "\"", "`", "'s", "'ll", "n't", "#", "@", "$", "%", "^", "&", "*", "_", "\\", "|", "~",
  " ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", "\u2581",
];

function mulberry32(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function corpus(count = 3000, seed = 1) {
  const random = mulberry32(seed);
  const out = [...kCases];
  while (out.length < count) {
    const n = 1 + Math.floor(random() * 24);
    let s = "";
    for (let i = 0; i < n; ++i) s += kFragments[Math.floor(random() * kFragments.length)];
    out.push(s);
  }
  return out;
}
