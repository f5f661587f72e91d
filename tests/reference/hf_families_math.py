"""The math of hf_families.py: a decoder-only transformer read from a Hugging Face config.json the way the
HF modeling code reads it, for LLaMA (llama3 / linear / dynamic RoPE scaling), Mistral (sliding window),
Qwen2 (q/k/v biases, YaRN), Qwen3 (q/k RMSNorm), Gemma 2 (soft-capping, sandwich norms, alternating
windows), Gemma 3 (q/k norm, local/global RoPE) and Phi-3 (fused projections, LongRoPE, partial rotary).

Written from the semantics of the transformers sources (modeling_rope_utils.py: _compute_default_rope_parameters,
_compute_linear_scaling_rope_parameters, _compute_dynamic_ntk_parameters, _compute_yarn_parameters,
_compute_longrope_parameters, _compute_llama3_parameters; masking_utils.py: sliding_window_overlay,
causal_mask_function; modeling_gemma2.py / modeling_gemma3.py / modeling_phi3.py / modeling_qwen2.py /
modeling_qwen3.py / modeling_mistral.py), not copied from them. Two formulations of everything:
  forward()      batched: masks as [T, T] tensors, RoPE by rotate_half on fp32 cos/sin tables (as HF),
  forward_alt()  one query at a time over an explicit key range, RoPE as a complex rotation with float64
                 angles, inverse frequencies derived again from the formulas in float64 (rounded to fp32,
                 which is what HF keeps), norms / activations through other expressions.

A model is a Spec (spec_from_config) plus params: {"embed": [V, C], "norm": [C], "lm_head": [V, C] when untied,
"layers": [{"<HF name after model.layers.N.>": tensor}]}, with UNFUSED attention / MLP names
(self_attn.q_proj.weight ..., mlp.gate_proj.weight ...); hf_families.py fuses them for Phi-3 when writing.

Letters: T = tokens, V = vocab, C = hidden, H = q heads, Hkv = kv heads, D = head_dim, R = rotary dims.
"""
import math

import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------
# RoPE parameters (one dict per layer: "rot" R, "attn" attention factor, and "inv" [R/2] fp32, or for LongRoPE
# "inv_short" / "inv_long" / "switch")

def rope_type_of(scaling):
    """HF's BC rule: rope_scaling["rope_type"], else the old key "type", else default."""
    if not scaling:
        return "default"
    return scaling.get("rope_type", scaling.get("type", "default"))


def _default_inv(base, dim):
    # HF: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), all fp32.
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def llama3_bands(inv, scaling):
    """Which of _compute_llama3_parameters' three bands each frequency falls in: 'high' (wavelen <
    orig/high_freq_factor: kept), 'low' (wavelen > orig/low_freq_factor: divided by factor), 'mid' (smoothed)."""
    old = scaling["original_max_position_embeddings"]
    lo_wl, hi_wl = old / scaling["low_freq_factor"], old / scaling["high_freq_factor"]
    out = []
    for f in inv.tolist():
        wl = 2 * math.pi / f
        out.append("high" if wl < hi_wl else "low" if wl > lo_wl else "mid")
    return out


def rope_params(kind, base, dim, scaling, max_pos, cfg_orig_max=None):
    """The inverse frequencies and attention factor of one RoPE, as the HF function for `kind` computes them at
    init (seq_len None). cfg_orig_max: a top-level config original_max_position_embeddings (Phi-3)."""
    rp = {"rot": dim, "attn": 1.0, "kind": kind}
    if kind == "default":
        rp["inv"] = _default_inv(base, dim)
    elif kind == "linear":
        rp["inv"] = _default_inv(base, dim) / scaling["factor"]
    elif kind == "dynamic":
        # _compute_dynamic_ntk_parameters: seq_len defaults to max_position_embeddings, and the base becomes
        # base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2)) = base * 1 ** ... = base.
        # It is recomputed only once a sequence grows past max_position_embeddings (dynamic_rope_update), and frost
        # never runs past it: within the context the rotation IS the default one (frost's choice and HF's alike).
        factor, seq = scaling["factor"], max_pos
        eff = base * ((factor * seq / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        assert eff == base
        rp["inv"] = _default_inv(eff, dim)
    elif kind == "llama3":
        inv = _default_inv(base, dim)
        factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        mid = ~(wavelen < old / hi) * ~(wavelen > old / lo)
        rp["inv"] = torch.where(mid, smoothed, scaled)
    elif kind == "yarn":
        # _compute_yarn_parameters (transformers >= 4.5x / 5.x). factor: the explicit rope_scaling["factor"] (5.x;
        # 4.5x replaced it by max_pos / original_max when original_max was given — equal in our configs, checked
        # in hf_families.py). The correction range uses original_max_position_embeddings (else max_pos).
        factor = scaling.get("factor")
        orig = scaling.get("original_max_position_embeddings") or max_pos
        if factor is None:
            factor = max_pos / orig
        attn = scaling.get("attention_factor")
        mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")

        def get_mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
        if attn is None:
            attn = get_mscale(factor, mscale) / get_mscale(factor, mscale_all) if (mscale and mscale_all) \
                else get_mscale(factor)
        beta_fast = scaling.get("beta_fast") or 32
        beta_slow = scaling.get("beta_slow") or 1
        truncate = scaling.get("truncate", True)

        def corr_dim(n_rot):
            return (dim * math.log(orig / (n_rot * 2 * math.pi))) / (2 * math.log(base))
        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extra = 1 - ramp  # 1: keep (extrapolate), 0: divide by factor (interpolate)
        rp["inv"] = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
        rp["attn"] = float(attn)
        rp["yarn_range"] = (low, high)
    elif kind == "longrope":
        # _compute_longrope_parameters: with a top-level original_max_position_embeddings (Phi-3), factor =
        # max_pos / original_max; attention_factor = sqrt(1 + ln(factor) / ln(original_max)) unless given.
        orig = cfg_orig_max if cfg_orig_max is not None else (scaling.get("original_max_position_embeddings")
                                                              or max_pos)
        factor = max_pos / orig if cfg_orig_max is not None else scaling.get("factor") or max_pos / orig
        attn = scaling.get("attention_factor")
        if attn is None:
            attn = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        rp["inv_short"] = 1.0 / (torch.tensor(scaling["short_factor"], dtype=torch.float32) * base ** shape)
        rp["inv_long"] = 1.0 / (torch.tensor(scaling["long_factor"], dtype=torch.float32) * base ** shape)
        rp["switch"] = orig  # frost: position p < orig → short factors, else long (per position, cacheable)
        rp["attn"] = float(attn)
    else:
        raise ValueError("unknown rope type " + kind)
    return rp


def inv_at(rp, positions):
    """Per-position inverse frequencies [T, R/2] (LongRoPE switches at rp["switch"])."""
    pos = torch.as_tensor(positions)
    if "inv_short" in rp:
        return torch.where(pos[:, None] < rp["switch"], rp["inv_short"][None, :], rp["inv_long"][None, :])
    return rp["inv"][None, :].expand(len(pos), -1)


def rope_cos_sin(rp, T, dtype):
    """cos, sin [T, R] as HF's *RotaryEmbedding.forward: angles pos * inv_freq in fp32 (fp64 for fp64 runs),
    cat(freqs, freqs), times the attention factor."""
    wd = torch.float64 if dtype == torch.float64 else torch.float32
    pos = torch.arange(T, dtype=wd)
    freqs = pos[:, None] * inv_at(rp, list(range(T))).to(wd)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * rp["attn"]).to(dtype), (emb.sin() * rp["attn"]).to(dtype)


# ----------------------------------------------------------------------------------------
# Spec: everything the forward needs, read from config.json the way the HF classes read it

def spec_from_config(cfg):
    arch = cfg["architectures"][0]
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or C // H
    L, P = cfg["num_hidden_layers"], cfg["max_position_embeddings"]
    s = {"arch": arch, "C": C, "H": H, "Hkv": Hkv, "D": D, "L": L, "V": cfg["vocab_size"], "P": P,
         "eps": cfg["rms_norm_eps"], "norm_offset": 0.0,
         # PretrainedConfig's default is untied; Gemma{2,3}Config default tie_word_embeddings to true
         "tied": cfg.get("tie_word_embeddings", arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM")),
         "embed_scale": None, "act": "silu", "sandwich": False, "qk_norm": False, "attn_scale": D ** -0.5,
         "attn_softcap": None, "final_softcap": None, "fused": False}
    theta = cfg.get("rope_theta", 10000.0)
    scaling = cfg.get("rope_scaling")
    kind = rope_type_of(scaling)
    partial = cfg.get("partial_rotary_factor", 1.0) if arch == "Phi3ForCausalLM" else 1.0
    rot = int(D * partial)
    main_rope = rope_params(kind, theta, rot, scaling, P, cfg.get("original_max_position_embeddings")
                            if arch == "Phi3ForCausalLM" else None)
    ropes = [main_rope] * L
    windows = [None] * L
    if arch == "LlamaForCausalLM":
        assert cfg.get("hidden_act", "silu") == "silu" and not cfg.get("attention_bias")
    elif arch == "MistralForCausalLM":
        if cfg.get("sliding_window") is not None:
            windows = [cfg["sliding_window"]] * L
    elif arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        # Qwen2Config / Qwen3Config: a window only with use_sliding_window, then on layers >= max_window_layers.
        if cfg.get("use_sliding_window") and cfg.get("sliding_window") is not None:
            windows = [cfg["sliding_window"] if i >= cfg["max_window_layers"] else None for i in range(L)]
        s["qk_norm"] = arch == "Qwen3ForCausalLM"
        assert arch == "Qwen2ForCausalLM" or not cfg.get("attention_bias")
    elif arch == "Phi3ForCausalLM":
        s["fused"] = True
        if cfg.get("sliding_window") is not None:
            windows = [cfg["sliding_window"]] * L
    elif arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        s.update(norm_offset=1.0, embed_scale=C ** 0.5, act=cfg["hidden_activation"], sandwich=True,
                 attn_scale=cfg["query_pre_attn_scalar"] ** -0.5, attn_softcap=cfg.get("attn_logit_softcapping"),
                 final_softcap=cfg.get("final_logit_softcapping"))
        assert s["act"] == "gelu_pytorch_tanh"
        if arch == "Gemma2ForCausalLM":
            types = cfg.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention"
                                               for i in range(L)]
        else:
            s["qk_norm"] = True
            pattern = cfg.get("sliding_window_pattern", 6)
            types = cfg.get("layer_types") or ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                               for i in range(L)]
            # Gemma3TextModel: a second rotary embedding for local layers, rope_local_base_freq and no scaling.
            local = rope_params("default", cfg.get("rope_local_base_freq", 10000.0), D, None, P)
            ropes = [local if t == "sliding_attention" else main_rope for t in types]
        windows = [cfg["sliding_window"] if t == "sliding_attention" else None for t in types]
    else:
        raise ValueError("unsupported architecture " + arch)
    s["bias_qkv"] = arch == "Qwen2ForCausalLM"
    s["ropes"], s["windows"] = ropes, windows
    return s


# ----------------------------------------------------------------------------------------
# primary formulation

def _rms(x, w, eps, offset):
    x32 = x if x.dtype == torch.float64 else x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * (w + offset if offset else w)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _act(s, g):
    return g * torch.sigmoid(g) if s["act"] == "silu" else _gelu_tanh(g)


def attention_mask(T, window, causal=True):
    """[T, T] bool, True = may attend: causal_mask_function (kv <= q) and, with a window W,
    sliding_window_overlay (kv > q - W): W keys including the query's own."""
    q = torch.arange(T)[:, None]
    kv = torch.arange(T)[None, :]
    m = kv <= q if causal else torch.ones(T, T, dtype=torch.bool)
    if window is not None:
        m = m & (kv > q - window)
    return m


def forward(p, s, ids, causal=True, off=(), ropes=None, windows=None, taps=None):
    """ids: list[int] → (logits [T, V], hidden [T, C]). `off` names features to switch off for the "it bites"
    checks ("window", "attn_softcap", "final_softcap", "qk_norm", "embed_scale"); ropes / windows replace the
    per-layer RoPE parameters / sliding windows; taps (a dict) receives "max_score" (largest |score| before
    capping) and "max_raw_logit"."""
    H, Hkv, D, eps, no = s["H"], s["Hkv"], s["D"], s["eps"], s["norm_offset"]
    T = len(ids)
    dtype = p["embed"].dtype
    kv_of = torch.arange(H) // (H // Hkv)
    x = p["embed"][torch.tensor(ids, dtype=torch.long)]
    if s["embed_scale"] is not None and "embed_scale" not in off:
        x = x * torch.tensor(s["embed_scale"], dtype=dtype)
    max_score = 0.0
    for i, lyr in enumerate(p["layers"]):
        rp = (ropes or s["ropes"])[i]
        R = rp["rot"]
        cos, sin = rope_cos_sin(rp, T, dtype)
        h = _rms(x, lyr["input_layernorm.weight"], eps, no)
        q = h @ lyr["self_attn.q_proj.weight"].t()
        k = h @ lyr["self_attn.k_proj.weight"].t()
        v = h @ lyr["self_attn.v_proj.weight"].t()
        if s["bias_qkv"]:
            q = q + lyr["self_attn.q_proj.bias"]
            k = k + lyr["self_attn.k_proj.bias"]
            v = v + lyr["self_attn.v_proj.bias"]
        q = q.reshape(T, H, D).transpose(0, 1)
        k = k.reshape(T, Hkv, D).transpose(0, 1)
        v = v.reshape(T, Hkv, D).transpose(0, 1)
        if s["qk_norm"] and "qk_norm" not in off:
            q = _rms(q, lyr["self_attn.q_norm.weight"], eps, no)
            k = _rms(k, lyr["self_attn.k_norm.weight"], eps, no)
        q = torch.cat((q[..., :R] * cos + _rotate_half(q[..., :R]) * sin, q[..., R:]), dim=-1)
        k = torch.cat((k[..., :R] * cos + _rotate_half(k[..., :R]) * sin, k[..., R:]), dim=-1)
        k, v = k[kv_of], v[kv_of]
        sc = (q @ k.transpose(1, 2)) * s["attn_scale"]
        mask = attention_mask(T, None if "window" in off else (windows or s["windows"])[i], causal)
        max_score = max(max_score, float(sc.masked_fill(~mask, 0).abs().max()))
        cap = s["attn_softcap"]
        if cap is not None and "attn_softcap" not in off:
            sc = torch.tanh(sc / cap) * cap
        sc = sc.masked_fill(~mask, float("-inf"))
        o = (torch.softmax(sc, dim=-1) @ v).transpose(0, 1).reshape(T, H * D)
        o = o @ lyr["self_attn.o_proj.weight"].t()
        if s["sandwich"]:
            x = x + _rms(o, lyr["post_attention_layernorm.weight"], eps, no)
            h = _rms(x, lyr["pre_feedforward_layernorm.weight"], eps, no)
        else:
            x = x + o
            h = _rms(x, lyr["post_attention_layernorm.weight"], eps, no)
        m = (_act(s, h @ lyr["mlp.gate_proj.weight"].t()) * (h @ lyr["mlp.up_proj.weight"].t())) \
            @ lyr["mlp.down_proj.weight"].t()
        x = x + (_rms(m, lyr["post_feedforward_layernorm.weight"], eps, no) if s["sandwich"] else m)
    hid = _rms(x, p["norm"], eps, no)
    logits = hid @ p.get("lm_head", p["embed"]).t()
    if taps is not None:
        taps["max_score"] = max_score
        taps["max_raw_logit"] = float(logits.abs().max())
    cap = s["final_softcap"]
    if cap is not None and "final_softcap" not in off:
        logits = torch.tanh(logits / cap) * cap
    return logits, hid


# ----------------------------------------------------------------------------------------
# alternative formulation

def inv_freq_f64(rp_kind, base, dim, scaling, max_pos, orig_max=None):
    """The inverse frequencies again, from the formulas in float64 python (no torch pow), rounded to fp32
    like HF's inv_freq buffer. LongRoPE: (short, long)."""
    half = dim // 2
    plain = [base ** (-2.0 * i / dim) for i in range(half)]
    if rp_kind in ("default", "dynamic"):
        out = plain
    elif rp_kind == "linear":
        out = [f / scaling["factor"] for f in plain]
    elif rp_kind == "llama3":
        factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        out = []
        for f in plain:
            wl = 2 * math.pi / f
            if wl < old / hi:
                out.append(f)
            elif wl > old / lo:
                out.append(f / factor)
            else:
                a = (old / wl - lo) / (hi - lo)
                out.append((1 - a) * f / factor + a * f)
    elif rp_kind == "yarn":
        factor = scaling["factor"]
        orig = scaling.get("original_max_position_embeddings") or max_pos
        def rotations_dim(n_rot):  # the dimension pair that turns n_rot times over orig positions
            return half * math.log(orig / (2 * math.pi * n_rot)) / math.log(base)
        lo = max(math.floor(rotations_dim(scaling.get("beta_fast") or 32)), 0)
        hi = min(math.ceil(rotations_dim(scaling.get("beta_slow") or 1)), dim - 1)
        hi = hi + 0.001 if hi == lo else hi
        out = []
        for i, f in enumerate(plain):
            keep = 1.0 - min(max((i - lo) / (hi - lo), 0.0), 1.0)
            out.append(f * keep + f / factor * (1.0 - keep))
    elif rp_kind == "longrope":
        return ([f / a for f, a in zip(plain, scaling["short_factor"])],
                [f / a for f, a in zip(plain, scaling["long_factor"])])
    else:
        raise ValueError(rp_kind)
    return out


def alt_inv_per_position(s, cfg, T):
    """Per layer: (inverse frequencies per position [T, R/2] float64 holding fp32 values, attention factor, R),
    derived from the config again (inv_freq_f64), not from the Spec's tables."""
    arch = s["arch"]
    scaling = cfg.get("rope_scaling")
    kind = rope_type_of(scaling)
    P = cfg["max_position_embeddings"]
    rot = s["ropes"][0]["rot"]
    orig = cfg.get("original_max_position_embeddings") if arch == "Phi3ForCausalLM" else None
    out = []
    for i in range(s["L"]):
        local = arch == "Gemma3ForCausalLM" and s["windows"][i] is not None
        if local:
            inv = inv_freq_f64("default", float(cfg.get("rope_local_base_freq", 10000.0)), rot, None, P)
            attn = 1.0
        else:
            inv = inv_freq_f64(kind, float(cfg.get("rope_theta", 10000.0)), rot, scaling, P, orig)
            attn = s["ropes"][i]["attn"]
        if kind == "longrope" and not local:
            short, long_ = (torch.tensor(v, dtype=torch.float32).double() for v in inv)
            per_pos = torch.stack([short if t < orig else long_ for t in range(T)])
        else:
            per_pos = torch.tensor(inv, dtype=torch.float32).double()[None, :].expand(T, -1)
        out.append((per_pos, attn, rot))
    return out


def _alt_rope_tables(s, cfg, T):
    """Per layer: complex rotations [T, R/2] (complex128, attention factor folded in) and R."""
    out = []
    for per_pos, attn, rot in alt_inv_per_position(s, cfg, T):
        ang = torch.arange(T, dtype=torch.float64)[:, None] * per_pos
        out.append((torch.polar(torch.full_like(ang, attn), ang), rot))
    return out


def forward_alt(p, s, cfg, ids):
    """One query at a time over keys max(0, t - W + 1) .. t, complex RoPE, repeat_interleave GQA, F.* ops."""
    C, H, Hkv, D, eps, off = s["C"], s["H"], s["Hkv"], s["D"], s["eps"], s["norm_offset"]
    T = len(ids)
    dtype = p["embed"].dtype
    ctype = torch.complex128 if dtype == torch.float64 else torch.complex64
    tables = _alt_rope_tables(s, cfg, T)

    def rms(x, w):
        return (w + off) * (x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps))

    def rope(x, table):  # x [T, n, D]
        rot, R = table
        half = R // 2
        z = torch.complex(x[..., :half], x[..., half:R]) * rot.to(ctype)[:, None, :]
        return torch.cat((z.real, z.imag, x[..., R:]), dim=-1)

    def act(g):
        return F.silu(g) if s["act"] == "silu" else F.gelu(g, approximate="tanh")

    x = F.embedding(torch.tensor(ids, dtype=torch.long), p["embed"])
    if s["embed_scale"] is not None:
        x = x * math.sqrt(C)
    for i, lyr in enumerate(p["layers"]):
        def lin(h, name, bias=False):
            return F.linear(h, lyr[name + ".weight"], lyr[name + ".bias"] if bias else None)
        h = rms(x, lyr["input_layernorm.weight"])
        q = lin(h, "self_attn.q_proj", s["bias_qkv"]).reshape(T, H, D)
        k = lin(h, "self_attn.k_proj", s["bias_qkv"]).reshape(T, Hkv, D)
        v = lin(h, "self_attn.v_proj", s["bias_qkv"]).reshape(T, Hkv, D)
        if s["qk_norm"]:
            q, k = rms(q, lyr["self_attn.q_norm.weight"]), rms(k, lyr["self_attn.k_norm.weight"])
        q, k = rope(q, tables[i]), rope(k, tables[i])
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        W = s["windows"][i]
        rows = []
        for t in range(T):
            first = 0 if W is None else max(0, t - W + 1)
            sc = torch.einsum("hd,shd->hs", q[t], k[first:t + 1]) * s["attn_scale"]
            if s["attn_softcap"] is not None:
                sc = s["attn_softcap"] * torch.tanh(sc / s["attn_softcap"])
            rows.append(torch.einsum("hs,shd->hd", torch.softmax(sc, -1), v[first:t + 1]).reshape(H * D))
        o = lin(torch.stack(rows), "self_attn.o_proj")
        if s["sandwich"]:
            x = x + rms(o, lyr["post_attention_layernorm.weight"])
            h = rms(x, lyr["pre_feedforward_layernorm.weight"])
            x = x + rms(lin(act(lin(h, "mlp.gate_proj")) * lin(h, "mlp.up_proj"), "mlp.down_proj"),
                        lyr["post_feedforward_layernorm.weight"])
        else:
            x = x + o
            h = rms(x, lyr["post_attention_layernorm.weight"])
            x = x + lin(act(lin(h, "mlp.gate_proj")) * lin(h, "mlp.up_proj"), "mlp.down_proj")
    hid = rms(x, p["norm"])
    logits = F.linear(hid, p.get("lm_head", p["embed"]))
    if s["final_softcap"] is not None:
        logits = s["final_softcap"] * torch.tanh(logits / s["final_softcap"])
    return logits, hid
