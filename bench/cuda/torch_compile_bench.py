#!/usr/bin/env python3
"""gpt-fast-style baseline for the CUDA decoder: a random-weight LLaMA decoder with a static KV cache,
its one-token decode step compiled with torch.compile(mode="reduce-overhead") (Inductor kernels replayed
as CUDA graphs), greedy decode at several batch sizes — the decoder a user would pick over eager PyTorch.

Same shapes, dtype, context and steps as frost-cuda-bench (bench/cuda/cuda_bench.cc) and
torch_eager_bench.py, so scripts/gpu_check.sh compares them in one run:

  python3 torch_compile_bench.py --shape 1b --batches 1,64 --out r.json
  python3 torch_compile_bench.py --check     # the static-cache model against torch_eager_bench's, tiny fp32

Choices written down: weights random (std 0.02, norms 1, tied head) as torch_eager_bench.py; the KV cache is a
preallocated [B, Hkv, max_ctx, D] buffer per layer written with index_copy_ at the step's position (gpt-fast),
attention over the whole buffer with a boolean mask of the filled positions, GQA by repeating kv heads inside
the compiled graph; torch.compile without coordinate-descent tuning (its compile time would not fit the GPU
lease); each batch size is its own compiled graph (static shapes), compiled before timing (compile seconds
reported apart). Torch 1.x (no torch.compile) runs the same module eagerly, for --check only.
"""
import argparse, json, os, statistics, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_eager_bench as eager  # noqa: E402  (shapes, RoPE convention, the eager reference model)

SHAPES = eager.SHAPES
EPS, THETA, STD = eager.EPS, eager.THETA, eager.STD


class StaticModel(torch.nn.Module):
    """The eager benchmark's model with its weights, and a static KV cache for batch B. Weights and caches are
    registered buffers: torch.compile's CUDA graphs treat them as static memory (not inputs to copy each
    replay), and the caches' in-place writes stay inside the graph."""

    def __init__(self, ref, B, max_ctx):
        super().__init__()
        self.H, self.Hkv, self.D = ref.H, ref.Hkv, ref.D
        self.register_buffer("emb", ref.emb)
        self.register_buffer("norm", ref.norm)
        self.register_buffer("cos", ref.cos)
        self.register_buffer("sin", ref.sin)
        dev, dt = ref.emb.device, ref.emb.dtype
        self.blocks = torch.nn.ModuleList()
        for L in ref.layers:
            blk = torch.nn.Module()
            for k, t in L.items():
                blk.register_buffer(k, t)
            blk.register_buffer("k_cache", torch.zeros(B, self.Hkv, max_ctx, self.D, device=dev, dtype=dt))
            blk.register_buffer("v_cache", torch.zeros(B, self.Hkv, max_ctx, self.D, device=dev, dtype=dt))
            self.blocks.append(blk)
        self.max_ctx = max_ctx

    def forward(self, tokens, input_pos):
        """tokens [B, T] at positions input_pos [T] (a tensor: one graph serves every position). Returns the
        logits of the last token [B, V]."""
        B, T = tokens.shape
        H, Hkv, D = self.H, self.Hkv, self.D
        x = self.emb[tokens]
        cos, sin = self.cos[input_pos], self.sin[input_pos]  # [T, D]
        # query at position p sees the cache positions <= p
        mask = torch.arange(self.max_ctx, device=tokens.device)[None, :] <= input_pos[:, None]  # [T, ctx]
        for L in self.blocks:
            h = eager.rmsnorm(x, L.attn_norm)
            q, k, v = F.linear(h, L.wqkv).split([H * D, Hkv * D, Hkv * D], -1)
            q = eager.rope(q.view(B, T, H, D).transpose(1, 2), cos, sin)
            k = eager.rope(k.view(B, T, Hkv, D).transpose(1, 2), cos, sin)
            v = v.view(B, T, Hkv, D).transpose(1, 2)
            L.k_cache.index_copy_(2, input_pos, k)
            L.v_cache.index_copy_(2, input_pos, v)
            kk, vv = L.k_cache, L.v_cache
            if H != Hkv:
                kk, vv = kk.repeat_interleave(H // Hkv, 1), vv.repeat_interleave(H // Hkv, 1)
            o = eager.sdpa(q, kk, vv, mask).transpose(1, 2).reshape(B, T, H * D)
            x = x + F.linear(o, L.wo)
            gate, up = F.linear(eager.rmsnorm(x, L.ffn_norm), L.w13).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, L.w2)
        return F.linear(eager.rmsnorm(x[:, -1], self.norm), self.emb)


def cuda_time(fn, device):
    if device.type == "cuda":
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0.record(); fn(); t1.record(); t1.synchronize()
        return t0.elapsed_time(t1) / 1e3
    t0 = time.perf_counter(); fn(); return time.perf_counter() - t0


def bench_batch(ref, B, context, steps, repeats, device, compile_):
    m = StaticModel(ref, B, context + steps)
    for blk in m.blocks:  # "prefilled" to `context`
        blk.k_cache[:, :, :context].normal_()
        blk.v_cache[:, :, :context].normal_()
    step = m
    if compile_:
        step = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    tok0 = torch.randint(ref.emb.shape[0], (B, 1), device=device)
    pos = [torch.tensor([context + s], device=device) for s in range(steps)]

    def run():
        tok = tok0
        for s in range(steps):  # greedy, next token stays on the device
            tok = step(tok, pos[s]).argmax(-1, keepdim=True).clone()
        return tok
    t0 = time.perf_counter()
    run(); run()  # compile, record the CUDA graphs, warm
    if device.type == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    t = statistics.median(cuda_time(run, device) for _ in range(repeats))
    del m
    return {"batch": B, "context": context, "steps": steps, "tok_s": B * steps / t,
            "ms_per_step": t / steps * 1e3, "compile_and_warm_s": compile_s}


def self_check(device):
    """The static-cache model (eagerly) against the eager benchmark's cached forward, tiny fp32."""
    torch.manual_seed(1)
    ref = eager.Model(SHAPES["tiny"], torch.float32, device, max_pos=64)
    B, P, N = 2, 8, 6
    prompt = torch.randint(ref.emb.shape[0], (B, P), device=device)
    m = StaticModel(ref, B, 64)
    got = [m.forward(prompt, torch.arange(P, device=device))]
    cache = ref.new_cache(B, 64)
    want = [ref.forward(prompt, 0, cache)]
    tok = want[-1].argmax(-1, keepdim=True)
    for s in range(N):
        got.append(m.forward(tok, torch.tensor([P + s], device=device)))
        want.append(ref.forward(tok, P + s, cache))
        tok = want[-1].argmax(-1, keepdim=True)
    diff = max((g - w).abs().max().item() for g, w in zip(got, want))
    ok = diff < 1e-4
    print(f"check: static cache vs eager cached forward, {P}+{N} positions x batch {B}: max |diff| {diff:.3g} "
          f"-> {'PASS' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="run the static-cache model eagerly")
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.set_grad_enabled(False)
    if a.check:
        sys.exit(0 if self_check(device) else 1)
    compile_ = not a.no_compile and hasattr(torch, "compile")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    cuda = device.type == "cuda"
    res = {"tool": "torch_compile_bench", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(device) if cuda else "cpu", "dtype": a.dtype,
           "compiled": compile_, "mode": "reduce-overhead" if compile_ else "eager", "shapes": {},
           "copy_GBps_read_plus_write": eager.copy_bandwidth(device) if cuda else None}
    for name in a.shape or ["15m"]:
        ref = eager.Model(SHAPES[name], dtype, device, max_pos=a.context + a.steps)
        wb = ref.weight_bytes()
        bw = res["copy_GBps_read_plus_write"]
        r = res["shapes"][name] = {"config": SHAPES[name], "weight_bytes": wb, "decode": [],
                                   "limit_tok_s": bw * 1e9 / wb if bw else None}
        for B in [int(b) for b in a.batches.split(",") if b]:
            r["decode"].append(eager.oom_guard(
                lambda: bench_batch(ref, B, a.context, a.steps, a.repeats, device, compile_),
                {"batch": B, "error": "oom"}, cuda))
            d = r["decode"][-1]
            print(f"[{name}] batch {B}: " + ("OOM" if "error" in d else
                  f"{d['tok_s']:.0f} tok/s, {d['ms_per_step']:.3f} ms/step (compile+warm {d['compile_and_warm_s']:.0f}s)"),
                  flush=True)
        del ref
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
