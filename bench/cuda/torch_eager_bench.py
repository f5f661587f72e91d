#!/usr/bin/env python3
"""PyTorch *eager* baseline for the C++/CUDA LLaMA decoder benchmark.

Random-weight LLaMA decoder in plain eager PyTorch (no torch.compile, no CUDA
graphs): batched greedy decode over a preallocated KV cache, batch-1 prefill,
weight bytes, and (on CUDA) device-to-device copy bandwidth.
Works with torch 1.13 (CPU, no SDPA -> matmul+softmax fallback) through 2.x.

  python3 torch_eager_bench.py --shape 1b --batches 1,4,16,64,256 --out r.json
  python3 torch_eager_bench.py --check      # cache/RoPE correctness, tiny fp32
"""
import argparse, json, math, statistics, sys, time
import torch
import torch.nn.functional as F

SHAPES = {  # dim, layers, heads, kv_heads, ffn, vocab
    "15m": dict(dim=288, layers=6, heads=6, kv_heads=6, ffn=768, vocab=32000),
    "1b": dict(dim=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=32000),
    "tiny": dict(dim=64, layers=2, heads=4, kv_heads=2, ffn=172, vocab=512),
}
EPS, THETA, STD = 1e-5, 10000.0, 0.02
SDPA = getattr(F, "scaled_dot_product_attention", None)  # absent in torch 1.13


class Model:
    """Weights as plain tensors; lm_head is tied to the embedding."""

    def __init__(self, cfg, dtype, device, max_pos, seed=0):
        torch.manual_seed(seed)
        C, F_, V = cfg["dim"], cfg["ffn"], cfg["vocab"]
        self.H, self.Hkv = cfg["heads"], cfg["kv_heads"]
        self.D = C // self.H
        rnd = lambda *s: (torch.randn(*s, device=device) * STD).to(dtype)
        one = lambda n: torch.ones(n, device=device, dtype=dtype)
        self.emb, self.norm = rnd(V, C), one(C)
        self.layers = [dict(attn_norm=one(C),
                            wqkv=rnd((self.H + 2 * self.Hkv) * self.D, C),
                            wo=rnd(C, self.H * self.D),
                            ffn_norm=one(C),
                            w13=rnd(2 * F_, C),  # fused gate|up
                            w2=rnd(C, F_)) for _ in range(cfg["layers"])]
        # RoPE tables, HF rotate_half convention: [max_pos, D] = cat(freqs, freqs)
        inv = 1.0 / THETA ** (torch.arange(0, self.D, 2, device=device).float() / self.D)
        freqs = torch.outer(torch.arange(max_pos, device=device).float(), inv)
        emb = torch.cat([freqs, freqs], -1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)

    def params(self):
        return [self.emb, self.norm] + [t for l in self.layers for t in l.values()]

    def weight_bytes(self):
        return sum(p.numel() * p.element_size() for p in self.params())

    def new_cache(self, B, max_ctx, random=False):
        """Per layer (k, v), each a contiguous [B, Hkv, max_ctx, D] tensor."""
        dev, dt = self.emb.device, self.emb.dtype
        mk = (lambda: torch.randn(B, self.Hkv, max_ctx, self.D, device=dev).to(dt)) if random \
            else (lambda: torch.zeros(B, self.Hkv, max_ctx, self.D, device=dev, dtype=dt))
        return [(mk(), mk()) for _ in self.layers]

    def forward(self, tokens, pos, cache=None, all_logits=False):
        """tokens [B, T] at positions pos..pos+T-1. With cache: k/v are written at
        those positions and attention covers 0..pos+T-1; without cache (pos must be
        0) attention covers only these tokens. Returns logits [B, V] (last token)
        or [B, T, V] if all_logits."""
        B, T = tokens.shape
        H, Hkv, D = self.H, self.Hkv, self.D
        x = self.emb[tokens]  # [B, T, C]
        cos, sin = self.cos[pos:pos + T], self.sin[pos:pos + T]
        for i, L in enumerate(self.layers):
            h = rmsnorm(x, L["attn_norm"])
            q, k, v = F.linear(h, L["wqkv"]).split([H * D, Hkv * D, Hkv * D], -1)
            q = rope(q.view(B, T, H, D).transpose(1, 2), cos, sin)     # [B, H, T, D]
            k = rope(k.view(B, T, Hkv, D).transpose(1, 2), cos, sin)   # [B, Hkv, T, D]
            v = v.view(B, T, Hkv, D).transpose(1, 2)
            if cache is not None:  # append at pos, then attend over the whole prefix
                ck, cv = cache[i]
                ck[:, :, pos:pos + T] = k
                cv[:, :, pos:pos + T] = v
                k, v = ck[:, :, :pos + T], cv[:, :, :pos + T]
            o = attention(q, k, v, pos).transpose(1, 2).reshape(B, T, H * D)
            x = x + F.linear(o, L["wo"])
            gate, up = F.linear(rmsnorm(x, L["ffn_norm"]), L["w13"]).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, L["w2"])
        x = rmsnorm(x if all_logits else x[:, -1], self.norm)
        return F.linear(x, self.emb)  # tied lm_head


def rmsnorm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rope(x, cos, sin):  # x [B, heads, T, D]; cos/sin [T, D]
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def sdpa(q, k, v, mask):
    """mask: bool [Tq, L], True = may attend (None = attend to everything)."""
    if SDPA is not None:
        return SDPA(q, k, v, attn_mask=mask)
    s = (q @ k.transpose(-1, -2)).float() * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).to(q.dtype) @ v


def attention(q, k, v, pos):
    """q [B, H, T, D] at positions pos..pos+T-1; k, v [B, Hkv, pos+T, D].
    GQA: query head h uses kv head h // (H / Hkv)."""
    B, H, T, D = q.shape
    G = H // k.shape[1]
    if T == 1:
        # Decode: the new token sees every cached position, so no mask. Fold the G
        # query heads sharing a kv head into the query-length axis instead of
        # copying (repeating) the KV cache every step.
        return sdpa(q.reshape(B, H // G, G, D), k, v, None).reshape(B, H, 1, D)
    if G > 1:  # prompt: repeat kv heads explicitly (no enable_gqa in old torch)
        k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    # causal: query i (position pos+i) sees keys j <= pos+i
    mask = torch.ones(T, k.shape[2], dtype=torch.bool, device=q.device).tril(pos)
    return sdpa(q, k, v, mask)


def timed(fn, device, repeats):
    """Median seconds of fn() over `repeats` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0.record(); fn(); t1.record(); t1.synchronize()
            times.append(t0.elapsed_time(t1) / 1e3)
        else:
            t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_decode(m, B, context, steps, repeats, device):
    cache = m.new_cache(B, context + steps, random=True)  # "prefilled" to `context`
    tok0 = torch.randint(m.emb.shape[0], (B, 1), device=device)

    def run():
        tok = tok0
        for s in range(steps):  # greedy; next token stays on device (no host sync)
            tok = m.forward(tok, context + s, cache).argmax(-1, keepdim=True)
        return tok
    t = timed(run, device, repeats)
    return {"batch": B, "context": context, "steps": steps,
            "tok_s": B * steps / t, "ms_per_step": t / steps * 1e3}


def bench_prefill(m, P, repeats, device):
    cache = m.new_cache(1, P)
    tokens = torch.randint(m.emb.shape[0], (1, P), device=device)
    t = timed(lambda: m.forward(tokens, 0, cache).argmax(-1), device, repeats)
    return {"tokens": P, "tok_s": P / t, "ms": t * 1e3}


def copy_bandwidth(device, nbytes=2 << 30, reps=10):
    """Device-to-device copy GB/s, counting bytes read + bytes written."""
    src, dst = (torch.empty(nbytes, dtype=torch.uint8, device=device) for _ in range(2))
    t = timed(lambda: [dst.copy_(src) for _ in range(reps)], device, 1)
    del src, dst
    return 2 * nbytes * reps / t / 1e9


def oom_guard(fn, on_oom, cuda):
    """fn(), or on_oom if it ran out of memory (then free the cached blocks)."""
    try:
        return fn()
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        if "out of memory" not in str(e).lower():
            raise
        return on_oom
    finally:
        if cuda:
            torch.cuda.empty_cache()


def self_check(device):
    """Cached path (chunked prefill + greedy decode) vs one no-cache forward."""
    torch.manual_seed(1)
    m = Model(SHAPES["tiny"], torch.float32, device, max_pos=64)
    prompt = torch.randint(m.emb.shape[0], (2, 8), device=device)  # batch 2
    cache, got = m.new_cache(2, 64), []
    got.append(m.forward(prompt[:, :5], 0, cache, all_logits=True))  # prefill chunk at 0
    got.append(m.forward(prompt[:, 5:], 5, cache, all_logits=True))  # chunk at pos 5 (T>1, pos>0)
    seq, tok = prompt, got[-1][:, -1].argmax(-1, keepdim=True)
    for _ in range(6):  # greedy decode, one token at a time
        seq = torch.cat([seq, tok], 1)
        got.append(m.forward(tok, seq.shape[1] - 1, cache, all_logits=True))
        tok = got[-1][:, -1].argmax(-1, keepdim=True)
    ref = m.forward(seq, 0, None, all_logits=True)  # whole sequence, no cache
    got = torch.cat(got, 1)
    diff = (got - ref).abs().max().item()
    ok = torch.allclose(got, ref, atol=1e-4, rtol=1e-4)
    print(f"check: {seq.shape[1]} positions x batch 2, max |logit diff| = {diff:.3g} "
          f"-> {'PASS' if ok else 'FAIL'} (sdpa={'yes' if SDPA else 'fallback'})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", default="1,4,16,64,256")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true", help="run the tiny fp32 cache/RoPE self-check and exit")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.set_grad_enabled(False)
    if a.check:
        sys.exit(0 if self_check(device) else 1)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    batches = [int(b) for b in a.batches.split(",") if b]
    cuda = device.type == "cuda"
    res = {"tool": "torch_eager_bench", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(device) if cuda else "cpu",
           "dtype": a.dtype, "sdpa": SDPA is not None, "shapes": {},
           "copy_GBps_read_plus_write": copy_bandwidth(device) if cuda else None,
           "notes": "copy_GBps_read_plus_write = 2 GiB tensor .copy_ on device, counting bytes read "
                    "plus bytes written. limit_tok_s = copy_GBps_read_plus_write*1e9 / weight_bytes: "
                    "batch-1 decode upper bound if each step only reads every weight byte once "
                    "at that total memory traffic rate (KV cache and activations ignored). "
                    "Eager PyTorch, no torch.compile, no CUDA graphs."}
    for name in a.shape or ["15m"]:
        cfg, bw = SHAPES[name], res["copy_GBps_read_plus_write"]
        m = Model(cfg, dtype, device, max_pos=max(a.context + a.steps, a.prefill))
        wb = m.weight_bytes()
        r = res["shapes"][name] = {"config": cfg, "weight_bytes": wb, "decode": [],
                                   "limit_tok_s": bw * 1e9 / wb if bw else None}
        for B in batches:
            r["decode"].append(oom_guard(lambda: bench_decode(m, B, a.context, a.steps, a.repeats, device),
                                         {"batch": B, "error": "oom"}, cuda))
        r["prefill"] = oom_guard(lambda: bench_prefill(m, a.prefill, a.repeats, device),
                                 {"tokens": a.prefill, "error": "oom"}, cuda)
        del m
    # short table
    bw = res["copy_GBps_read_plus_write"]
    print(f"torch {res['torch']} | {res['device']} | {a.dtype} | copy bw (r+w) "
          + (f"{bw:.0f} GB/s" if bw else "n/a"))
    for name, r in res["shapes"].items():
        lim = f"{r['limit_tok_s']:.0f}" if r["limit_tok_s"] else "n/a"
        print(f"[{name}] weights {r['weight_bytes'] / 1e6:.1f} MB, b1 bandwidth limit {lim} tok/s")
        print(f"  {'batch':>6} {'tok/s':>12} {'ms/step':>9}")
        for d in r["decode"]:
            print(f"  {d['batch']:>6} " + ("  OOM" if "error" in d else
                                           f"{d['tok_s']:>12.1f} {d['ms_per_step']:>9.3f}"))
        p = r["prefill"]
        print(f"  prefill {p['tokens']} tok: " + ("OOM" if "error" in p else f"{p['tok_s']:.1f} tok/s"))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
