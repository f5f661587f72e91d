#!/usr/bin/python3
"""Independent reference for the model families frost serves: tiny random Hugging Face checkpoints.

Run with Debian's python (torch 1.13 CPU; `transformers` is NOT needed):

    /usr/bin/python3 tests/reference/hf_families.py --out DIR [--only NAME[,NAME...]] [--seed N]

For each case it writes DIR/<name>/{config.json, generation_config.json, model.safetensors (or shards with
model.safetensors.index.json), expected.json}. The configs carry each family's real config.json field names
and layout (dimensions shrunk: hidden 64, 4 heads, vocab 300, max_position_embeddings 64), the weights its real
tensor names. expected.json is hf_reference.py's format: {"input_ids": [24 ids], "logits": [24][300],
"greedy": {"prompt_ids": 5 ids, "new_ids": 20 argmax ids, each step re-running the whole sequence,
"logprobs": 20 float64 log_softmax values of each greedy id at its step},
"final_hidden_last": [C] after the final norm, "features": [...], "diagnostics": {...}}.

  case              class / model_type          what it covers
  llama3_2          LlamaForCausalLM / llama    rope_scaling llama3 (factor 32, low 1, high 4, original_max 256
                                                so that frequencies fall in all three bands at head_dim 16 and
                                                theta 5e5), tied, head_dim written, eos_token_id a list
  smollm2           LlamaForCausalLM / llama    theta 1e5, tied, GQA, no head_dim, rope_interleaved false
  tinyllama_linear  LlamaForCausalLM / llama    rope_scaling {"type": "linear"} (the old key), 4 heads / 1 kv
  llama_dynamic     LlamaForCausalLM / llama    rope_scaling dynamic (see below: the default rotation)
  mistral           MistralForCausalLM          sliding_window 8 on every layer, head_dim 32 (q_dim 128 != 64)
  mistral_bf16      the same, stored as BF16    bf16 weights converted at load (expected: bf16 values upcast)
  qwen2_5           Qwen2ForCausalLM / qwen2    q/k/v biases (no o_proj bias), tied, use_sliding_window false
                                                with sliding_window 32768 and max_window_layers 21 (no window)
  qwen2_5_yarn      the same + rope_scaling     yarn, factor 4, original_max 16; attention factor 0.1 ln 4 + 1
  qwen3             Qwen3ForCausalLM / qwen3    q_norm / k_norm per head before RoPE, head_dim 32, tied; SHARDED
                                                (2 files + model.safetensors.index.json)
  gemma2            Gemma2ForCausalLM / gemma2  (1+w) RMSNorm x4 per layer, embeddings * sqrt(hidden), gated
                                                gelu_pytorch_tanh MLP, query_pre_attn_scalar 24 (!= head_dim 16),
                                                attn softcap 50 and final softcap 30 (both bite), sliding_window 8
                                                on layers 0 and 2 (no layer_types, as the real config), no
                                                tie_word_embeddings (Gemma2Config defaults it to true)
  gemma3            Gemma3ForCausalLM /         q/k (1+w) norms, 6 layers, sliding_window_pattern 6 (layers 0-4
                    gemma3_text                 slide, 5 is global), global rope_theta 1e6 with linear factor 8,
                                                local rope_local_base_freq 1e4 unscaled, head_dim 32
  phi3_5            Phi3ForCausalLM / phi3      fused qkv_proj / gate_up_proj, longrope, original_max 16,
                                                sliding_window 262144 (never binds), untied, MHA
  phi4_mini         Phi3ForCausalLM / phi3      partial_rotary_factor 0.75 (12 of 16 dims rotate), longrope,
                                                tied, GQA

Conventions (frost's, checked against the transformers sources, see hf_families_math.py):
  * Sliding window W (masking_utils.sliding_window_overlay): query i sees keys j with i - W < j <= i, W keys
    counting itself. (Some older transformers masks, _make_causal_mask, let j = i - W in too: W + 1 keys.)
  * rope_type dynamic: HF's _compute_dynamic_ntk_parameters gives the plain rotation for every sequence up to
    max_position_embeddings and rescales only beyond it; frost caps a sequence at max_position_embeddings, so
    the expected values use the DEFAULT rotation.
  * longrope: frost uses short_factor at positions p < original_max_position_embeddings and long_factor at
    p >= it, per position (a cached key keeps its rotation as the sequence grows; what HF's own cached decoding
    produces when it starts below original_max). HF's forward over a whole sequence picks ONE list by its
    length (long once max position + 1 > original_max, every key re-rotated); vLLM switches a whole batch when
    any position exceeds original_max. The attention factor sqrt(1 + ln(f) / ln(original_max)), f =
    max_position_embeddings / original_max, multiplies cos and sin at every position (rotated dims only).
  * yarn: the explicit factor; the correction range from original_max_position_embeddings; truncate
    (floor / ceil) by default; beta_fast 32, beta_slow 1; the attention factor multiplies cos and sin.

Expected values are the float64 evaluation of the math; the fp32 evaluation (HF's own arithmetic, RoPE angles in
fp32) lies within diagnostics.fp64_max_abs_diff (< 3e-5) of them. Before anything of a case is written it passes
self-checks: the alternative formulation, fp32 vs fp64, causality, gradient reach of every parameter, greedy
margins (top-1 minus top-2 > 1e-3), safetensors read-back, and per feature that it bites (the logits change when
it is switched off or off by one, windows leave the first W rows alone, softcaps see scores near the cap, ...).
A failed check raises (exit 1); exit 77 means torch is missing.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref  # noqa: E402  (exits 77 without torch)
from hf_reference import check, f9, flat_params, map_params  # noqa: E402
import torch  # noqa: E402

import hf_families_math as fm  # noqa: E402

N_INPUT, N_PROMPT, N_NEW = 24, 5, 20
VOCAB = 300


# ----------------------------------------------------------------------------------------
# configs: each family's real config.json fields, dimensions shrunk

def _common(arch, model_type, version, **fields):
    cfg = {"architectures": [arch], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
           "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
           "max_position_embeddings": 64, "model_type": model_type, "num_attention_heads": 4,
           "num_hidden_layers": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": version,
           "use_cache": True, "vocab_size": VOCAB}
    cfg.update(fields)
    return dict(sorted(cfg.items()))  # save_pretrained writes the keys sorted


def llama_cfg(**fields):
    base = dict(attention_bias=False, mlp_bias=False, pretraining_tp=1, rope_scaling=None)
    base.update(fields)
    return _common("LlamaForCausalLM", "llama", "4.45.0", **base)


def longrope_lists(n):
    short = [round(1.0 + 0.6 * (i / (n - 1)) ** 2, 4) for i in range(n)]
    long_ = [round(1.0 + 9.0 * (i / (n - 1)) ** 1.5, 4) for i in range(n)]
    return short, long_


def phi3_cfg(partial, n_kv, tied, **fields):
    rot = int(16 * partial)
    short, long_ = longrope_lists(rot // 2)
    cfg = dict(attention_bias=False, embd_pdrop=0.0, eos_token_id=2, num_key_value_heads=n_kv,
               original_max_position_embeddings=16, pad_token_id=2, resid_pdrop=0.0,
               rope_scaling={"long_factor": long_, "short_factor": short, "type": "longrope"},
               sliding_window=262144, tie_word_embeddings=tied)
    if partial != 1.0:
        cfg.update(partial_rotary_factor=partial, full_attn_mod=1, interpolate_factor=1, lm_head_bias=False,
                   mlp_bias=False)
    cfg.update(fields)
    return _common("Phi3ForCausalLM", "phi3", "4.45.0" if partial != 1.0 else "4.43.3", **cfg)


def gemma_cfg(arch, model_type, version, **fields):
    base = dict(attention_bias=False, bos_token_id=2, cache_implementation="hybrid", head_dim=16,
                hidden_activation="gelu_pytorch_tanh", pad_token_id=0, rms_norm_eps=1e-06)
    base.update(fields)
    cfg = _common(arch, model_type, version, **base)
    if fields.get("tie_word_embeddings") is None:
        del cfg["tie_word_embeddings"]  # absent from the real configs: Gemma*Config defaults it to true
    if "hidden_act" not in fields:
        del cfg["hidden_act"]  # Gemma 3 writes only hidden_activation
    return dict(sorted(cfg.items()))


QWEN2 = dict(max_window_layers=21, rms_norm_eps=1e-06, rope_theta=1000000.0, sliding_window=32768,
             tie_word_embeddings=True, use_sliding_window=False)

# name → (config, weight scales (see init_params), safetensors dtype, shards, generation_config.json)
LLAMA3_SCALING = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 256, "rope_type": "llama3"}
GEMMA_GEN = {"bos_token_id": 2, "cache_implementation": "hybrid", "pad_token_id": 0}
CASES = {
    "llama3_2": (llama_cfg(head_dim=16, bos_token_id=0, eos_token_id=[1, 8, 9], rope_theta=500000.0,
                           tie_word_embeddings=True, rope_scaling=LLAMA3_SCALING),
                 {}, torch.float32, 1,
                 {"bos_token_id": 0, "do_sample": True, "eos_token_id": [1, 8, 9], "temperature": 0.6,
                  "top_p": 0.9, "transformers_version": "4.45.0.dev0"}),
    "smollm2": (llama_cfg(rope_theta=100000, tie_word_embeddings=True, rope_interleaved=False),
                {}, torch.float32, 1, None),
    "tinyllama_linear": (llama_cfg(num_key_value_heads=1, rope_scaling={"factor": 2.0, "type": "linear"}),
                         {}, torch.float32, 1,
                         {"bos_token_id": 1, "eos_token_id": 2, "max_length": 64, "pad_token_id": 0}),
    "llama_dynamic": (llama_cfg(rope_scaling={"factor": 2.0, "rope_type": "dynamic"}), {}, torch.float32, 1, None),
    "mistral": (_common("MistralForCausalLM", "mistral", "4.45.0", head_dim=32, rope_theta=1000000.0,
                        sliding_window=8), {}, torch.float32, 1, None),
    "mistral_bf16": (_common("MistralForCausalLM", "mistral", "4.45.0", head_dim=32, rope_theta=1000000.0,
                             sliding_window=8, torch_dtype="bfloat16"), {}, torch.bfloat16, 1, None),
    "qwen2_5": (_common("Qwen2ForCausalLM", "qwen2", "4.43.1", **QWEN2), {"bias": 0.3}, torch.float32, 1,
                {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 1], "pad_token_id": 2,
                 "repetition_penalty": 1.1, "temperature": 0.7, "top_k": 20, "top_p": 0.8}),
    "qwen2_5_yarn": (_common("Qwen2ForCausalLM", "qwen2", "4.43.1", **QWEN2, rope_scaling={
        "factor": 4.0, "original_max_position_embeddings": 16, "type": "yarn"}),
        {"bias": 0.3}, torch.float32, 1, None),
    "qwen3": (_common("Qwen3ForCausalLM", "qwen3", "4.51.0", attention_bias=False, head_dim=32,
                      max_window_layers=4, rms_norm_eps=1e-06, rope_scaling=None, rope_theta=1000000,
                      sliding_window=None, tie_word_embeddings=True, use_sliding_window=False),
              {"qk_norm": 0.3}, torch.float32, 2, None),
    # gemma2 is written untied (tie_word_embeddings false): at these sizes a tied head cannot make the final
    # softcap bite and still give a varied greedy continuation; gemma3 covers the tied default (field absent).
    "gemma2": (gemma_cfg("Gemma2ForCausalLM", "gemma2", "4.42.4", attn_logit_softcapping=50.0,
                         tie_word_embeddings=False,
                         eos_token_id=[1, 107], final_logit_softcapping=30.0, hidden_act="gelu_pytorch_tanh",
                         query_pre_attn_scalar=24, sliding_window=8),
               {"qk": 0.4, "embed": 0.5, "final_norm": 4.0, "norm_noise": 0.3},
               torch.float32, 1, dict(GEMMA_GEN, eos_token_id=[1, 107])),
    "gemma3": (gemma_cfg("Gemma3ForCausalLM", "gemma3_text", "4.50.0.dev0", attn_logit_softcapping=None,
                         eos_token_id=[1, 106], final_logit_softcapping=None, head_dim=32, num_hidden_layers=6,
                         num_key_value_heads=1, query_pre_attn_scalar=32, rope_local_base_freq=10000,
                         rope_scaling={"factor": 8.0, "rope_type": "linear"}, rope_theta=1000000,
                         sliding_window=8, sliding_window_pattern=6),
               {"embed": 0.08, "final_norm": 0.5, "norm_noise": 0.3, "qk_norm": 0.3},
               torch.float32, 1, dict(GEMMA_GEN, eos_token_id=[1, 106], top_k=64, top_p=0.95)),
    "phi3_5": (phi3_cfg(1.0, 4, False), {}, torch.float32, 1, None),
    "phi4_mini": (phi3_cfg(0.75, 2, True), {}, torch.float32, 1, None),
}


# ----------------------------------------------------------------------------------------
# weights

def init_params(s, gen, sc):
    """Canonical unfused parameters. sc overrides the scales: qk (q/k std), embed, bias (q/k/v bias std),
    qk_norm (noise of q/k norm weights), final_norm / post_norm (centre of the final / Gemma post norms' w),
    norm_noise."""
    C, H, Hkv, D, Fd, V = s["C"], s["H"], s["Hkv"], s["D"], 128, s["V"]
    gemma = s["norm_offset"] == 1.0
    centre = 0.0 if gemma else 1.0  # a norm weight's neutral value (Gemma stores w of (1 + w))
    noise = sc.get("norm_noise", 0.1)

    def rn(*shape, std):
        return torch.randn(*shape, generator=gen) * std
    qk = sc.get("qk", 0.18 * math.sqrt(16 / D))  # |q|, |k| independent of head_dim
    p = {"embed": rn(V, C, std=sc.get("embed", 0.2 if s["tied"] else 0.5)), "layers": []}
    for _ in range(s["L"]):
        lyr = {"input_layernorm.weight": centre + rn(C, std=noise),
               "self_attn.q_proj.weight": rn(H * D, C, std=qk),
               "self_attn.k_proj.weight": rn(Hkv * D, C, std=qk),
               "self_attn.v_proj.weight": rn(Hkv * D, C, std=0.2),
               "self_attn.o_proj.weight": rn(C, H * D, std=0.15 * math.sqrt(64 / (H * D))),
               "post_attention_layernorm.weight": centre + sc.get("post_norm", 0.0) + rn(C, std=noise),
               "mlp.gate_proj.weight": rn(Fd, C, std=0.2),
               "mlp.up_proj.weight": rn(Fd, C, std=0.2),
               "mlp.down_proj.weight": rn(C, Fd, std=0.12)}
        if s["bias_qkv"]:
            lyr["self_attn.q_proj.bias"] = rn(H * D, std=sc["bias"])
            lyr["self_attn.k_proj.bias"] = rn(Hkv * D, std=sc["bias"])
            lyr["self_attn.v_proj.bias"] = rn(Hkv * D, std=sc["bias"] * 0.5)
        if s["qk_norm"]:
            lyr["self_attn.q_norm.weight"] = centre + rn(D, std=sc.get("qk_norm", 0.1))
            lyr["self_attn.k_norm.weight"] = centre + rn(D, std=sc.get("qk_norm", 0.1))
        if s["sandwich"]:
            lyr["pre_feedforward_layernorm.weight"] = centre + rn(C, std=noise)
            lyr["post_feedforward_layernorm.weight"] = centre + sc.get("post_norm", 0.0) + rn(C, std=noise)
        p["layers"].append(lyr)
    p["norm"] = centre + sc.get("final_norm", 0.0) + rn(C, std=noise)
    if not s["tied"]:
        p["lm_head"] = rn(V, C, std=0.15)
    return p


_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")


def hf_tensors(p, s):
    """(name, tensor) in the order save_pretrained writes them (sorted by name); Phi-3 fuses q|k|v rows into
    self_attn.qkv_proj.weight and gate|up rows into mlp.gate_up_proj.weight."""
    out = [("model.embed_tokens.weight", p["embed"]), ("model.norm.weight", p["norm"])]
    for i, lyr in enumerate(p["layers"]):
        pre = "model.layers.%d." % i
        names = dict(lyr)
        if s["fused"]:
            names["self_attn.qkv_proj.weight"] = torch.cat([names.pop("self_attn.%s.weight" % n)
                                                            for n in ("q_proj", "k_proj", "v_proj")])
            names["mlp.gate_up_proj.weight"] = torch.cat([names.pop("mlp.gate_proj.weight"),
                                                          names.pop("mlp.up_proj.weight")])
        out += [(pre + k, v) for k, v in names.items()]
    if "lm_head" in p:
        out.append(("lm_head.weight", p["lm_head"]))
    return sorted(out, key=lambda nt: nt[0])


# ----------------------------------------------------------------------------------------
# self-checks

def input_ids(seed):
    g = torch.Generator().manual_seed(seed * 7919 + VOCAB)
    ids = torch.randint(3, VOCAB, (N_INPUT,), generator=g).tolist()
    ids[13] = ids[4]  # a repeated token, 9 positions apart (outside an 8-window)
    return ids


def pick_input(fwd, seed):
    for attempt in range(60):
        ids = input_ids(seed * 100 + attempt)
        new_ids, margin = ref.greedy(fwd, ids[:N_PROMPT], N_NEW)
        if margin > 1e-3 and len(set(new_ids)) >= 8:
            return ids, new_ids, margin
    raise AssertionError("self-check failed: no input with a clear greedy continuation; try another --seed")


def maxdiff(a, b):
    return float((a - b).abs().max())


def common_checks(p, s, cfg, ids):
    logits, hid = fm.forward(p, s, ids)
    alt_l, alt_h = fm.forward_alt(p, s, cfg, ids)
    scale = max(1.0, float(logits.abs().max()))
    d_alt = max(maxdiff(logits, alt_l), maxdiff(hid, alt_h)) / scale
    check(d_alt < 1e-5, "alternative formulation agrees: max |diff| / max(1, max |logit|) = %.2e < 1e-5" % d_alt)
    p64 = map_params(p, lambda t: t.double())
    d64 = maxdiff(logits.double(), fm.forward(p64, s, ids)[0])
    check(d64 < 3e-5, "fp32 vs fp64: max |diff| = %.2e < 3e-5 (fp32 expected values are stable)" % d64)
    d_inv = max(float(((alt.float() - fm.inv_at(rp, list(range(len(ids))))) / alt).abs().max())
                for rp, (alt, _, _) in zip(s["ropes"], fm.alt_inv_per_position(s, cfg, len(ids))))
    check(d_inv < 5e-7, "RoPE inverse frequencies from both derivations agree to %.1e (a few fp32 ulps)" % d_inv)
    d_first = maxdiff(fm.forward(p, s, ids, causal=False)[0][0], logits[0])
    check(d_first > 0.05, "causal mask matters: position 0 changes by %.3f without it" % d_first)
    full64 = fm.forward(p64, s, ids)[0]
    for n in (5, 17):
        d_pre = maxdiff(fm.forward(p64, s, ids[:n])[0], full64[:n])
        check(d_pre < 1e-10, "causality (fp64): a %d-token prefix gives the first %d rows (%.1e)" % (n, n, d_pre))
    std_pos = float(logits.std(dim=1).min())
    check(std_pos > 0.3, "logits not flat: min per-position std = %.3f" % std_pos)
    n_top = len(set(torch.argmax(logits, dim=1).tolist()))
    check(n_top >= 4, "argmax varies across positions: %d distinct" % n_top)
    pg = map_params(p, lambda t: t.detach().clone().requires_grad_(True))
    lg, _ = fm.forward(pg, s, ids)
    (lg * torch.randn(lg.shape, generator=torch.Generator().manual_seed(7))).sum().backward()
    dead = [n for n, t in flat_params(pg) if t.grad is None or float(t.grad.abs().max()) == 0]
    check(not dead, "every parameter has a nonzero gradient%s" % ("" if not dead else ": dead " + ",".join(dead)))
    return logits, hid, d64


def bites(name, p, s, cfg, ids, logits):
    """Per-feature checks that each feature of the case changes the logits. Returns (features, diagnostics)."""
    feats, diag = [], {}
    T = len(ids)

    def differs(label, other, rows=slice(None), at_least=0.01, how="without it"):
        d = maxdiff(other[rows], logits[rows])
        check(d > at_least, "%s bites: logits change by %.3f %s" % (label, d, how))
        diag[label.replace(" ", "_") + "_effect"] = d

    scaling = cfg.get("rope_scaling")
    kind = fm.rope_type_of(scaling)
    theta = float(cfg.get("rope_theta", 1e4))
    plain = [dict(rp) if rp.get("kind") == "default" else fm.rope_params("default", theta, rp["rot"], None, s["P"])
             for rp in s["ropes"]]
    if kind == "llama3":
        rp = s["ropes"][0]
        bands = fm.llama3_bands(plain[0]["inv"], scaling)
        check(all(b in bands for b in ("high", "mid", "low")), "llama3 bands all present: %s" % bands)
        for b, new, old in zip(bands, rp["inv"].tolist(), plain[0]["inv"].tolist()):
            r = new / old
            ok = r == 1.0 if b == "high" else abs(r - 1 / scaling["factor"]) < 1e-6 if b == "low" \
                else 1 / scaling["factor"] < r < 1
            check(ok, "llama3 %s-band frequency scaled by %.5f" % (b, r))
        diag["llama3_bands"] = bands
    if kind in ("llama3", "linear", "yarn", "longrope"):
        differs("rope_scaling " + kind, fm.forward(p, s, ids, ropes=plain)[0])
        feats.append("rope_" + kind)
    if kind == "dynamic":
        d = maxdiff(s["ropes"][0]["inv"], plain[0]["inv"])
        check(d == 0.0, "dynamic within max_position_embeddings is the default rotation (inv_freq equal)")
        feats.append("rope_dynamic_as_default")
    if kind == "yarn":
        rp = s["ropes"][0]
        check(abs(rp["attn"] - (0.1 * math.log(scaling["factor"]) + 1)) < 1e-12,
              "yarn attention factor %.6f = 0.1 ln(factor) + 1" % rp["attn"])
        implicit = cfg["max_position_embeddings"] / scaling["original_max_position_embeddings"]
        check(implicit == scaling["factor"], "yarn factor %.1f = max_pos / original_max (%.1f): transformers 4.5x "
              "(ratio) and 5.x (explicit factor) agree here" % (scaling["factor"], implicit))
        diag["yarn_correction_range"] = list(rp["yarn_range"])
        # transformers < 4.5x took the correction range from max_position_embeddings, not original_max.
        old_range = fm.rope_params("yarn", float(cfg["rope_theta"]), rp["rot"],
                                   dict(scaling, original_max_position_embeddings=s["P"]), s["P"])
        diag["yarn_range_from_max_pos"] = list(old_range["yarn_range"])
        diag["yarn_range_from_max_pos_effect"] = maxdiff(fm.forward(p, s, ids, ropes=[old_range] * s["L"])[0],
                                                         logits)
        diag["yarn_attention_factor"] = rp["attn"]
    if kind == "longrope":
        rp = s["ropes"][0]
        sw = rp["switch"]
        short_only = [dict(r, inv_long=r["inv_short"]) for r in s["ropes"]]
        long_only = [dict(r, inv_short=r["inv_long"]) for r in s["ropes"]]
        lo = fm.forward(p, s, ids, ropes=short_only)[0]
        check(maxdiff(lo[:sw], logits[:sw]) == 0.0, "longrope: rows < %d use short_factor only" % sw)
        differs("longrope long_factor", lo, rows=slice(sw, None))
        hf_style = fm.forward(p, s, ids, ropes=long_only)[0]  # HF: T > original_max → long everywhere
        later = [dict(r, switch=sw + 1) if "switch" in r else r for r in s["ropes"]]
        differs("longrope switch off-by-one", fm.forward(p, s, ids, ropes=later)[0],
                how="switching at %d" % (sw + 1))
        diag["longrope_vs_hf_whole_sequence_long"] = maxdiff(hf_style, logits)
        check(abs(rp["attn"] - math.sqrt(1 + math.log(4.0) / math.log(sw))) < 1e-12,
              "longrope attention factor %.6f = sqrt(1 + ln 4 / ln %d)" % (rp["attn"], sw))
        feats.append("longrope_per_position_switch_at_%d" % sw)
    R, D = s["ropes"][0]["rot"], s["D"]
    if R < D:
        x = torch.randn(T, 2, D, generator=torch.Generator().manual_seed(3))
        cos, sin = fm.rope_cos_sin(s["ropes"][0], T, torch.float32)
        y = torch.cat((x[..., :R] * cos[:, None] + fm._rotate_half(x[..., :R]) * sin[:, None], x[..., R:]), -1)
        check(torch.equal(y[..., R:], x[..., R:]) and maxdiff(y[1:, :, :R], x[1:, :, :R]) > 0.01,
              "partial rotary: dims %d..%d pass unrotated, 0..%d rotate" % (R, D - 1, R - 1))
        sc_full = dict(scaling, short_factor=scaling["short_factor"] + [1.0] * ((D - R) // 2),
                       long_factor=scaling["long_factor"] + [1.0] * ((D - R) // 2))
        full = fm.rope_params(kind, float(cfg["rope_theta"]), D, sc_full, s["P"],
                              cfg.get("original_max_position_embeddings"))
        differs("partial rotary", fm.forward(p, s, ids, ropes=[full] * s["L"])[0])
        feats.append("partial_rotary_%d_of_%d" % (R, D))
    wins = [w for w in s["windows"] if w is not None]
    if wins and min(wins) < T:
        W = min(wins)
        nowin = fm.forward(p, s, ids, off={"window"})[0]
        check(maxdiff(nowin[:W], logits[:W]) == 0.0, "sliding window leaves rows 0..%d alone" % (W - 1))
        differs("sliding window", nowin, rows=slice(W, None))
        # The classic off-by-one (W + 1 keys, as some older transformers masks had) must show too.
        differs("window off-by-one", fm.forward(p, s, ids, windows=[w and w + 1 for w in s["windows"]])[0],
                how="with W + 1 keys")
        if len(set(s["windows"])) > 1:  # which layers slide (Gemma's (i + 1) % pattern rule) must matter
            flipped = s["windows"][1:] + s["windows"][:1]
            differs("sliding layer choice", fm.forward(p, s, ids, windows=flipped)[0], how="rotating it by one")
        feats.append("sliding_window_%d_layers_%s" % (W, [i for i, w in enumerate(s["windows"]) if w]))
    elif wins:
        check(maxdiff(fm.forward(p, s, ids, off={"window"})[0], logits) == 0.0,
              "sliding_window %d never binds within %d positions" % (wins[0], s["P"]))
    taps = {}
    fm.forward(p, s, ids, taps=taps)
    diag.update(max_abs_score=taps["max_score"], max_abs_raw_logit=taps["max_raw_logit"])
    if s["attn_softcap"]:
        cap = s["attn_softcap"]
        check(taps["max_score"] > 0.6 * cap,
              "attn softcap %.0f bites: max |score| %.1f" % (cap, taps["max_score"]))
        differs("attn softcap", fm.forward(p, s, ids, off={"attn_softcap"})[0])
        feats.append("attn_logit_softcapping")
    if s["final_softcap"]:
        cap = s["final_softcap"]
        check(taps["max_raw_logit"] > 0.6 * cap,
              "final softcap %.0f bites: max |raw logit| %.1f" % (cap, taps["max_raw_logit"]))
        differs("final softcap", fm.forward(p, s, ids, off={"final_softcap"})[0])
        feats.append("final_logit_softcapping")
    if s["qk_norm"]:
        differs("q/k norm", fm.forward(p, s, ids, off={"qk_norm"})[0])
        feats.append("qk_norm")
    if s["bias_qkv"]:
        nob = map_params(p, lambda t: t)
        for lyr in nob["layers"]:
            for n in ("q", "k", "v"):
                lyr["self_attn.%s_proj.bias" % n] = torch.zeros_like(lyr["self_attn.%s_proj.bias" % n])
        differs("qkv biases", fm.forward(nob, s, ids)[0])
        feats.append("qkv_bias")
    if s["arch"] == "Gemma3ForCausalLM":
        differs("local rope base", fm.forward(p, s, ids, ropes=[s["ropes"][-1]] * s["L"])[0])
        feats.append("gemma3_local_global_rope")
    if s["embed_scale"]:
        differs("embedding scale", fm.forward(p, s, ids, off={"embed_scale"})[0])
        feats += ["embed_scale_sqrt_hidden", "norm_1_plus_w", "sandwich_norms", "gelu_tanh"]
    if s["fused"]:
        feats.append("fused_qkv_gate_up")
    if s["tied"]:
        feats.append("tied_embeddings")
    if s["D"] * s["H"] != s["C"]:
        feats.append("q_dim_%d_ne_hidden_%d" % (s["D"] * s["H"], s["C"]))
    return feats, diag


# ----------------------------------------------------------------------------------------
# writing

def write_json(path, obj, compact=False):
    with open(path, "w") as f:
        if compact:
            json.dump(obj, f, separators=(",", ":"))
        else:
            json.dump(obj, f, indent=2)
        f.write("\n")


def write_weights(d, tensors, shards):
    """model.safetensors, or `shards` files model-0000i-of-0000n.safetensors plus model.safetensors.index.json
    (split between layers, as save_pretrained does by size). Every file is read back bit-exactly."""
    if shards == 1:
        groups = [("model.safetensors", tensors)]
    else:
        per = math.ceil(len(tensors) / shards)
        groups = [("model-%05d-of-%05d.safetensors" % (i + 1, shards), tensors[i * per:(i + 1) * per])
                  for i in range(shards)]
        write_json(os.path.join(d, "model.safetensors.index.json"), {
            "metadata": {"total_size": sum(t.numel() * t.element_size() for _, t in tensors)},
            "weight_map": {n: f for f, grp in groups for n, _ in grp}})
    for fname, grp in groups:
        path = os.path.join(d, fname)
        ref.write_safetensors(path, grp, {"format": "pt"})
        back = ref.read_safetensors(path)
        same = len(back) == len(grp) and all(back[n].dtype == t.dtype and back[n].shape == t.shape
                                             and torch.equal(back[n], t) for n, t in grp)
        check(same, "%s read back bit-exactly (%d tensors)" % (fname, len(grp)))


def greedy_logprobs(p, p64, s, prompt, new_ids):
    """log_softmax of the float64 logits at each greedy step, at the chosen token (what a server reports as the
    sampled token's logprob at temperature 0). One causal forward over prompt + new_ids[:-1] gives every step's
    row (causality holds to 1e-10 in fp64, checked above); checked against the step-by-step argmax and fp32."""
    seq = list(prompt) + list(new_ids[:-1])
    rows = slice(len(prompt) - 1, None)
    lp64 = torch.log_softmax(fm.forward(p64, s, seq)[0][rows], dim=1)
    check(torch.argmax(lp64, dim=1).tolist() == list(new_ids), "greedy logprob rows' argmax are the greedy ids")
    pick = (torch.arange(len(new_ids)), torch.tensor(new_ids))
    want = lp64[pick]
    lp32 = torch.log_softmax(fm.forward(p, s, seq)[0][rows], dim=1)[pick]
    d = maxdiff(lp32.double(), want)
    check(d < 3e-5, "greedy logprobs fp32 vs fp64: max |diff| = %.2e < 3e-5 (min %.3f)" % (d, float(want.min())))
    return want.tolist()


def build_case(out_dir, name, seed):
    cfg, scales, st_dtype, shards, gen_cfg = CASES[name]
    print(name + ":")
    s = fm.spec_from_config(cfg)
    k = list(CASES).index(name)
    p = init_params(s, torch.Generator().manual_seed(seed * 1000 + k), scales)
    if st_dtype == torch.bfloat16:
        p = map_params(p, lambda t: t.to(torch.bfloat16).float())  # the stored values, upcast
    ids, new_ids, margin = pick_input(lambda seq: fm.forward(p, s, seq), seed + k)
    logits, hid, d64 = common_checks(p, s, cfg, ids)
    check(margin > 1e-3, "greedy top-1/top-2 margin %.4f > 1e-3 (no near-ties)" % margin)
    check(len(set(new_ids)) >= 8, "greedy output varied (>= 8 distinct of %d): %s" % (N_NEW, new_ids))
    feats, diag = bites(name, p, s, cfg, ids, logits)
    # The written values are the float64 evaluation (the exact math); an fp32 implementation (HF's own, with its
    # fp32 RoPE angles, included) lands within fp64_max_abs_diff of them.
    p64 = map_params(p, lambda t: t.double())
    logits, hid = fm.forward(p64, s, ids)
    new64, _ = ref.greedy(lambda seq: fm.forward(p64, s, seq), ids[:N_PROMPT], N_NEW)
    check(new64 == new_ids, "greedy ids identical in fp32 and fp64")
    greedy_lps = greedy_logprobs(p, p64, s, ids[:N_PROMPT], new_ids)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "config.json"), cfg)
    if gen_cfg is not None:
        write_json(os.path.join(d, "generation_config.json"), gen_cfg)
    else:
        write_json(os.path.join(d, "generation_config.json"), {
            "_from_model_config": True, "bos_token_id": cfg.get("bos_token_id"),
            "eos_token_id": cfg.get("eos_token_id"), "transformers_version": cfg["transformers_version"]})
    write_weights(d, [(n, t.to(st_dtype)) for n, t in hf_tensors(p, s)], shards)
    diag.update(fp64_max_abs_diff=d64, greedy_min_margin=margin, torch=torch.__version__,
                layer_windows=s["windows"],
                rope=[{"kind": r["kind"], "rot": r["rot"], "attention_factor": r["attn"]} for r in s["ropes"]])
    write_json(os.path.join(d, "expected.json"), {
        "model": name, "input_ids": ids, "logits": [[f9(v) for v in row] for row in logits.tolist()],
        "greedy": {"prompt_ids": ids[:N_PROMPT], "new_ids": new_ids, "logprobs": [f9(v) for v in greedy_lps]},
        "final_hidden_last": [f9(v) for v in hid[-1].tolist()], "features": feats, "diagnostics": diag},
        compact=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--only", help="comma-separated case names (default: all): " + ", ".join(CASES))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reductions
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error("unknown case(s) %s (known: %s)" % (", ".join(unknown), ", ".join(CASES)))
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        build_case(args.out, name, args.seed)
    print("wrote %d models to %s" % (len(names), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
