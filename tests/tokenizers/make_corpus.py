#!/usr/bin/python3
"""Writes the tokenizer agreement corpus: JSON Lines, one JSON string per line (a "line" may hold newlines).

Generated, not downloaded, and deterministic (a fixed seed and Python's Mersenne Twister), so every run and
every machine compares the same texts. It aims at what tokenizers get wrong: prose with contractions in odd
cases, code with indentation, CJK / Arabic / Hebrew / Devanagari / Thai / Cyrillic, emoji (ZWJ sequences,
skin tones, flags), whitespace runs (spaces, tabs, CR LF, NBSP, ideographic space), numbers of every
length and script, decomposed accents and compatibility chars (NFC / NFKC), the text of special and added
tokens of Llama 3, Qwen3 and Gemma 3, and random mixes of all of these.

Usage: make_corpus.py OUT.jsonl [--lines N] [--seed S]
"""

import argparse
import json
import random

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, but we've been told you'd disagree.",
    "DON'T SHOUT. They'RE here; it'S late and I'M tired.",
    "Once upon a time, there was a little girl named Lily.",
    "Hello, world! How are you today?",
    "e.g. Mr. Smith paid $1,234.56 (approx. 1.2k) on 2024-03-15 at 09:30.",
    "\"Quoted\" text, 'single quotes', and an em—dash… plus «guillemets».",
]
CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    '{"name": "frost", "version": "1.0", "ids": [1, 2, 3], "ok": true, "x": null}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "if [[ -f $f ]]; then echo \"ok\" >&2; fi  # comment\r\n",
    "<div class=\"main\"><p>Hello</p><br/></div>\n<table><tr><td>1</td></tr></table>",
    "const f = async (x) => { await g(x ?? 0); return x?.y || `t${x}`; };",
    "    \n        indented\n\t\tmixed \t tabs\n",
]
SCRIPTS = [
    "你好，世界！今天天气很好。我们去公园散步吧。",
    "東京は日本の首都です。ひらがなとカタカナ、漢字。",
    "안녕하세요, 세계! 한국어 텍스트입니다.",
    "مرحبا بالعالم! هذه جملة باللغة العربية.",
    "שלום עולם! זה משפט בעברית.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "Привет, мир! Это предложение на русском языке.",
    "Γειά σου Κόσμε! Αυτή είναι μια πρόταση.",
    "Ελληνικά, Tiếng Việt có dấu: Nguyễn Thị Minh Khai.",
]
EMOJI = [
    "🙂", "😂🤣", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "❤️", "🏳️‍🌈", "🧑🏿‍🚀", "✨🔥💯", "☕", "🫠",
]
SPACES = [
    " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
    "\u2009", "\u200b", "        ", "\n    ", " \t\n",
]
NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "-0.5e-10", "1,000,000", "99.9%",
    "０１２３", "٠١٢٣٤", "१२३", "²³", "½", "Ⅻ", "0x1F", "1e9", "2024", "007",
]
UNICODE = [
    "e\u0301", "cafe\u0301", "A\u030a", "\u1100\u1161\u11a8", "\ufb01nance", "\uff21\uff22\uff23",
    "\u212b", "Å", "é", "ﬀ", "①", "㎏", "ǅ", "ß", "İ", "a\u0323\u0301", "\u0041\u0308\u0301",
]
TOKENS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_5|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|vision_start|>", "<bos>", "<eos>", "<start_of_turn>",
    "<end_of_turn>", "<unused0>", "<unused99>", "<mask>", "[multimodal]", "<pad>", "<unk>", "<s>", "</s>",
    "<|im_start", "im_end|>", "< think>", "<0x0A>",
]
POOLS = [PROSE, CODE, SCRIPTS, EMOJI, SPACES, NUMBERS, UNICODE, TOKENS]


def fixed_lines():
    """Every pool entry alone, and with spaces around, as a first sweep."""
    out = []
    for pool in POOLS:
        for s in pool:
            out += [s, " " + s, s + " ", "x" + s + "y", s + s]
    out += ["", " ", "a", "\n", "I", "'s", "'S", "don't", "  leading", "trailing  ", "a\n\nb", "a \n b"]
    return out


def random_mix(rng):
    """A few pool entries and random code points, joined by random separators."""
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.8:
            parts.append(rng.choice(rng.choice(POOLS)))
        elif r < 0.9:  # a random code point from ranges that matter (no surrogates)
            lo, hi = rng.choice([(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x52F), (0x600, 0x6FF),
                                 (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
                                 (0x1F300, 0x1FAFF), (0xFF00, 0xFFEF)])
            parts.append(chr(rng.randint(lo, hi)))
        else:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 15))))
        parts.append(rng.choice(["", "", " ", " ", "\n", "\t", "  ", ", ", ".", "\n\n"]))
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--lines", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=50)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    lines = fixed_lines()
    while len(lines) < a.lines:
        lines.append(random_mix(rng))
    with open(a.out, "w", encoding="utf-8") as f:
        for s in lines[: max(a.lines, 0)]:
            f.write(json.dumps(s, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
