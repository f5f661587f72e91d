#!/usr/bin/env python3
"""frostd serving on a device, checked over gRPC with frostctl (scripts/gpu_check.sh's `serve` phase; it runs
against the reference device here too, without a GPU):
  - every reference.json prompt, greedy: the golden's tokens, token for token;
  - a seeded top-p sample twice: the same tokens; and with logprobs (the host sampler draws that row): the same
    tokens again (the device sampler is the host sampler);
  - ModelInfo names the device; /metrics has frost_device_healthy 1 and device-sampled rows.
Writes --out (JSON) and exits 1 on any mismatch.
"""
import argparse, json, subprocess, sys, urllib.request


def generate(frostctl, addr, prompt, n, extra=()):
    cmd = [frostctl, "--addr", addr, "--timeout", "60", "generate", "--json", "--max-tokens", str(n),
           "--prompt", prompt, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"frostctl failed ({p.returncode}): {p.stderr.strip()}")
    ids = []
    for line in p.stdout.splitlines():
        msg = json.loads(line)
        ids += msg.get("chunk", {}).get("token_ids", [])
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frostctl", required=True)
    ap.add_argument("--addr", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ref = json.load(open(a.reference))
    res = {"cases": [], "ok": True}
    # frostd may still be warming up: wait for the first answer.
    for attempt in range(120):
        try:
            generate(a.frostctl, a.addr, "Once", 1, ("--temperature", "0"))
            break
        except Exception as e:  # noqa: BLE001
            if attempt == 119:
                raise
            import time
            time.sleep(0.5)
    for c in ref["cases"]:
        want = c["greedy_new_ids"]
        got = generate(a.frostctl, a.addr, c["prompt"], len(want), ("--temperature", "0"))
        ok = got == want
        res["cases"].append({"prompt": c["prompt"], "equal": ok, "first_difference":
                             next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)})
        res["ok"] &= ok
        print(f"golden '{c['prompt']}': {len(want)} greedy tokens {'equal' if ok else 'DIFFER'}")
    sample = ("--temperature", "0.9", "--top-p", "0.9", "--seed", "11")
    s1 = generate(a.frostctl, a.addr, "Once upon a time", 32, sample)
    s2 = generate(a.frostctl, a.addr, "Once upon a time", 32, sample)
    s3 = generate(a.frostctl, a.addr, "Once upon a time", 32, sample + ("--logprobs", "0"))
    res["seeded_reproduces"] = s1 == s2
    res["device_sample_equals_host_sample"] = s1 == s3
    res["ok"] &= s1 == s2 and s1 == s3
    print(f"seeded sample: reproduces {s1 == s2}, device draw == host draw {s1 == s3}")
    info = subprocess.run([a.frostctl, "--addr", a.addr, "info", "--json"], capture_output=True, text=True)
    res["model_info"] = json.loads(info.stdout) if info.returncode == 0 else {"error": info.stderr}
    metrics = urllib.request.urlopen(f"http://{a.metrics}/metrics", timeout=10).read().decode()
    res["metrics"] = [l for l in metrics.splitlines() if l.startswith("frost_device_")]
    healthy = any(l.startswith("frost_device_healthy") and l.endswith(" 1") for l in res["metrics"])
    res["ok"] &= healthy
    print(f"device {res['model_info'].get('device')} ({res['model_info'].get('device_name')}), healthy {healthy}")
    json.dump(res, open(a.out, "w"), indent=1)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
