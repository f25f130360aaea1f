"""Text for the tokenizer fixtures: hand-written prose in several scripts, code, emoji,
numbers and whitespace, plus seeded random mixes of them. Used both to train the small
tokenizers and as the test texts (make_fixtures.py)."""
import os
import random
import sysconfig

PROSE = [
    # Latin scripts
    "The quick brown fox jumps over the lazy dog. It's 12:45, isn't it? We'll see; they've "
    "said they'd come, but I'm not sure you're right.",
    "In the beginning the Universe was created. This has made a lot of people very angry and "
    "been widely regarded as a bad move.",
    "Tokenizers split text into pieces; a serving engine must split it exactly as the model "
    "saw it in training, or the model reads nonsense.",
    "Füße, Straße, naïve café — déjà vu! Ça va? Ünïcödé ÄÖÜ äöü ß. Größenverhältnisse der "
    "Außenwände müssen geprüft werden.",
    "¿Dónde está la biblioteca? El niño comió año tras año en la pequeña cañada.",
    "Zażółć gęślą jaźń. Łódź leży w centralnej Polsce, a Kraków na południu.",
    "Tiếng Việt có nhiều dấu: người, những, được, không, trường học.",
    "İstanbul'da ılık bir gün; ağaçların gölgesinde çay içtik.",
    # Cyrillic
    "Привет, мир! Как дела? Это тест токенизатора. Съешь же ещё этих мягких французских булок, "
    "да выпей чаю.",
    "Україна — держава у Східній Європі. Ґанок, їжак, єнот і йорж.",
    # Greek
    "Γειά σου Κόσμε! Αυτό είναι ένα τεστ. Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν.",
    # CJK
    "你好，世界！这是一个分词器的测试。我们喜欢编程，也喜欢读书。北京时间下午三点。",
    "こんにちは世界。カタカナとひらがなと漢字。東京は日本の首都です。ｶﾀｶﾅ（半角）も。",
    "안녕하세요 세계! 토크나이저 테스트입니다. 한국어는 한글로 씁니다.",
    "龍が如く、鬱蒼とした森。繁體字：學習、體驗、電腦。",
    # Arabic, Hebrew
    "مرحبا بالعالم! هذا اختبار. اللغة العربية تكتب من اليمين إلى اليسار.",
    "العَرَبِيَّةُ لُغَةٌ جَمِيلَةٌ، وَالأَرْقَامُ ٠١٢٣٤٥٦٧٨٩.",
    "שלום עולם! זהו מבחן של מפצל המילים.",
    # Devanagari and other Indic
    "नमस्ते दुनिया! यह एक परीक्षण है। हिन्दी देवनागरी लिपि में लिखी जाती है।",
    "संस्कृतम् जगतः एकतमा अतिप्राचीना समृद्धा शास्त्रीया च भाषा। ०१२३४५६७८९",
    "বাংলা ভাষা, தமிழ் மொழி, ไทย ภาษา, ქართული ენა, Հայերեն լեզու.",
    # Emoji
    "emoji: 🙂🚀🎉👍🏽 👨‍👩‍👧‍👦 🧑‍💻 👩🏾‍🚀 🏳️‍🌈 🏴‍☠️ flags 🇫🇷🇯🇵🇺🇸 keycaps 1️⃣#️⃣ ❤️‍🔥",
    "I ❤️ tokenizers 😀😀😀 and ✨sparkles✨; 🐍 + 🦀 = 💚",
    # Numbers and symbols
    "math: ∑ x² ≤ ∞, α+β=γ, ½ ¾ ⅓ Ⅻ ٣٤٥ ०१२ １２３ 3.14159 2.71828e-10 1,000,000 0xDEADBEEF",
    "Dates: 2024-06-11T12:34:56Z, 11/06/2024; phone +1 (555) 123-4567; 99.9% of $1234.56",
    "12345678901234567890 123 4567 89 0 00 000 0000",
    # Whitespace
    "tabs\tand\nnewlines\r\n  indented    spaces   \n\n\n\t\t  \r\n",
    "unicode spaces: \u00a0nbsp \u2003emspace \u3000ideographic \u200bzwsp \u2028ls \u2029ps \u180emvs",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
    "#include <vector>\n\ntemplate <typename T>\nstd::vector<T> twice(const std::vector<T>& v) {\n"
    "  std::vector<T> out;\n  out.reserve(v.size() * 2);\n  for (const T& x : v) { out.push_back(x); "
    "out.push_back(x); }\n  return out;\n}\n",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`); // 3\n",
    '{"name": "pagedllm", "version": "0.1.0", "tags": ["llm", "serving"], "nested": {"x": [1, 2.5, null]}}\n',
    "#!/bin/sh\nset -eu\nfor f in *.txt; do\n\techo \"$f\" | tr a-z A-Z >> out.log 2>&1\ndone\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC LIMIT 10;\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
]

EMOJI_AND_SYMBOLS = [
    "🙂", "🚀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🧑‍💻", "👩🏾‍🚀", "🏳️‍🌈", "🇫🇷", "🇯🇵", "1️⃣", "❤️‍🔥", "😀",
    "✨", "🐍", "🦀", "∑", "∞", "½", "→", "©", "™", "€", "£", "¥", "§", "¶", "†", "…", "—", "–",
]

WHITESPACE = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
              "    ", "\t\t", "\n    "]


def stdlib_dir():
    return sysconfig.get_paths()["stdlib"]


def stdlib_text(names):
    parts = []
    for name in names:
        with open(os.path.join(stdlib_dir(), name), encoding="utf-8") as f:
            parts.append(f.read())
    return "\n".join(parts)


def training_corpus():
    """What the small tokenizers are trained on: code and every script's prose."""
    code = stdlib_text(["textwrap.py", "string.py", "heapq.py", "bisect.py", "shlex.py"])
    return [code] + CODE * 5 + PROSE * 20 + [" ".join(EMOJI_AND_SYMBOLS)] * 5


def words():
    pool = []
    for text in PROSE + CODE:
        pool.extend(text.split())
    return pool + EMOJI_AND_SYMBOLS


def random_mix(rng, pool, count):
    """Seeded word salads: words of every script, code, emoji, numbers, whitespace runs."""
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(1, 40)):
            kind = rng.random()
            if kind < 0.65:
                parts.append(rng.choice(pool))
            elif kind < 0.75:
                parts.append(str(rng.randrange(0, 10 ** rng.randrange(1, 12))))
            elif kind < 0.85:
                parts.append(rng.choice(EMOJI_AND_SYMBOLS) * rng.randrange(1, 4))
            else:
                parts.append(rng.choice(WHITESPACE))
            parts.append(rng.choice(WHITESPACE[:4]) if rng.random() < 0.8 else "")
        texts.append("".join(parts))
    return texts


def random_codepoints(rng, count):
    """Random characters of the common planes (no surrogates, no U+2581), some astral."""
    texts = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randrange(1, 30)):
            bucket = rng.random()
            if bucket < 0.4:
                c = rng.randrange(0x20, 0x7F)
            elif bucket < 0.5:
                c = rng.randrange(0x00, 0x80)
            elif bucket < 0.65:
                c = rng.randrange(0x80, 0x800)
            elif bucket < 0.85:
                c = rng.randrange(0x800, 0xD800)
            elif bucket < 0.9:
                c = rng.randrange(0xE000, 0x10000)
            else:
                c = rng.randrange(0x10000, 0x30000)
            if c == 0x2581:
                c = ord("x")
            chars.append(chr(c))
        texts.append("".join(chars))
    return texts


def unseen_snippets(rng, count):
    """Random slices of stdlib files the tokenizers were not trained on."""
    text = stdlib_text(["json/decoder.py", "fractions.py", "calendar.py"])
    snippets = []
    for _ in range(count):
        start = rng.randrange(0, len(text) - 400)
        snippets.append(text[start:start + rng.randrange(20, 400)])
    return snippets


EDGE_CASES = [
    "", " ", "  ", "\n", "\n\n\n", "\t", "\r\n", "Hello", " Hello", "Hello world", "Hello  world",
    "  leading and trailing  ", "x" + " " * 17 + "y", "a" * 50, "ab" * 30 + " " + "abc" * 20,
    "I'm don't you'll we've they're she'd it's", "I'M DON'T YOU'LL WE'VE", "'s 's's",
    "\u0000\u0001\u007f control", "!!!??? ... --- *** ### @@@", "pagedllm pagedllm_serving pagedllm",
    "xpagedllm pagedllm. (pagedllm) pagedllm1 _pagedllm",
    # single_word's word characters are Rust regex's \w: '_', marks, ZWJ, Nl, circled letters; not No.
    "½pagedllm ²pagedllm pagedllm\u20dd \u200dpagedllm \u24b6pagedllm pagedllm\u00b7 \u216bpagedllm \u0301pagedllm",
    "The answer is 42, you see.",
    "mixed日本語English한국어Русский123", "\U00010348\U0010fffd\U0001f9d1\u200d\U0001f4bb",
    "e\u0301 vs \u00e9; \u212b vs \u00c5; \ufb01 ligature; \u2460 circled; \uff21\uff22 fullwidth",
    "HELLO World ŞİMDİ ΣΊΣΥΦΟΣ straße İi",
    # Marks newer than HF's normalization tables (classes it does not know) next to old ones.
    "a\u064c\u0d3c \u0d3c\u064c x\u0898\u0301 \u1ac0\u0300e \u0627\u08ca\u064b \U00011935\U00011930 \U00011938",
    # Special and added tokens of every fixture, alone, glued to words and spaced.
    "<s> not a special token </s> <unk>", "<s>[INST] Hi [/INST]</s>",
    "<|endoftext|> <|begin_of_text|><|eot_id|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "a<|endoftext|>b",
    "text <mask> more  <mask>  end", "[R]   next [R]x", "<tool>call</tool> <tool>",
    "Hello World, HELLO  WORLD and hello world", "Ｈｅｌｌｏ　Ｗｏｒｌｄ",
]


def test_texts(seed=1234):
    rng = random.Random(seed)
    return (EDGE_CASES + PROSE + CODE + unseen_snippets(rng, 60) + random_mix(rng, words(), 160)
            + random_codepoints(rng, 60))
