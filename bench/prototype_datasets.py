#!/usr/bin/env python3
"""Smaller dataset directories for `frost-bench prototype` experiments (docs/prototype.md, issue 24).

    python3 bench/prototype_datasets.py OUT_DIR [--shared ../shared]

Writes, from ../shared/data:
  OUT_DIR/sub_emobank_valence, OUT_DIR/sub_emobank_arousal
      the first 2,000 training and 1,000 test rows of each split, bounds [1, 5];
  OUT_DIR/pairs_proxy
      a stand-in for a sentence-pair regression set: two emobank_valence sentences joined by
      " || ", label clip(2.5 + 3*((V1 - 3) + (V2 - 3)), 0, 5) rounded to 3 decimals; 1,500 training
      pairs drawn from the training split and 500 test pairs from the test split (random.Random(0)).
Deterministic: the same files on every run.
"""
import argparse
import json
import os
import random


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def dump(d, splits, meta):
    os.makedirs(d, exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(d, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    a = ap.parse_args()
    data = os.path.join(a.shared, "data")
    for name in ("emobank_valence", "emobank_arousal"):
        tr = load(os.path.join(data, name, "train.jsonl"))
        te = load(os.path.join(data, name, "test.jsonl"))
        dump(os.path.join(a.out, "sub_" + name), {"train": tr[:2000], "test": te[:1000]},
             {"name": "sub_" + name, "label_min": 1.0, "label_max": 5.0})
    tr = load(os.path.join(data, "emobank_valence", "train.jsonl"))
    te = load(os.path.join(data, "emobank_valence", "test.jsonl"))
    rng = random.Random(0)

    def pairs(rows, n):
        out = []
        for _ in range(n):
            x, y = rng.sample(rows, 2)
            label = min(5.0, max(0.0, 2.5 + 3 * ((x["label"] - 3) + (y["label"] - 3))))
            out.append({"text": x["text"] + " || " + y["text"], "label": round(label, 3)})
        return out

    dump(os.path.join(a.out, "pairs_proxy"), {"train": pairs(tr, 1500), "test": pairs(te, 500)},
         {"name": "pairs_proxy", "label_min": 0.0, "label_max": 5.0})


if __name__ == "__main__":
    main()
