#!/usr/bin/python3
"""Writes a random-weight checkpoint of Llama-3.2-1B's geometry for the bandwidth benchmarks
(scripts/bench_families_1b.sh): the real config.json fields (hidden 2048, 16 layers, 32 heads, 8 kv heads,
head_dim 64, intermediate 8192, vocab 128256, tied embeddings, llama3 RoPE scaling), BF16 safetensors as
Meta ships them (2.5 GB). Decode at this shape reads every weight once per token: it is bandwidth-bound, unlike
builtin:15m, which sits in cache. The weights are random (std 0.02), so the text is noise; the speed is not.

Usage: make_1b_checkpoint.py OUT_DIR   (streams tensor by tensor: peak memory one tensor)
"""
import json
import os
import struct
import sys

import torch

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False, "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 128256,
}


def shapes(c):
    C, F, V, D = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    Q, KV = c["num_attention_heads"] * D, c["num_key_value_heads"] * D
    out = [("model.embed_tokens.weight", (V, C)), ("model.norm.weight", (C,))]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", (C,)), (p + "post_attention_layernorm.weight", (C,)),
                (p + "self_attn.q_proj.weight", (Q, C)), (p + "self_attn.k_proj.weight", (KV, C)),
                (p + "self_attn.v_proj.weight", (KV, C)), (p + "self_attn.o_proj.weight", (C, Q)),
                (p + "mlp.gate_proj.weight", (F, C)), (p + "mlp.up_proj.weight", (F, C)),
                (p + "mlp.down_proj.weight", (C, F))]
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    items = shapes(CONFIG)
    header, off = {}, 0
    for name, shape in items:
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    gen = torch.Generator().manual_seed(1)
    tmp = os.path.join(out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape in items:
            t = torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape, generator=gen) * 0.02
            f.write(t.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
    os.replace(tmp, os.path.join(out, "model.safetensors"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    print("wrote %s (%.2f GB)" % (out, off / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
