#!/usr/bin/env python3
"""frostd serving on a device, checked over gRPC with frostctl (scripts/gpu_check.sh's `serve` phase; it runs
against the reference device here too, without a GPU):
  - every reference.json prompt, greedy: the golden's tokens, token for token;
  - a seeded top-p sample twice: the same tokens; and with logprobs (the host sampler draws that row): the same
    tokens again (the device sampler is the host sampler);
  - ModelInfo names the device; /metrics has frost_device_healthy 1 and device-sampled rows;
  - with --prototype-data: a small prototype training job (its features from the device decoder, its head on
    --head-device: the GPU with a CUDA LibTorch), activated, then Predict on it: the job's report names the
    head's device, Predict answers bounded values with prototypes, and server-info accounts the head's bytes
    under that device. frostd needs an admin token (FROST_ADMIN_TOKEN); frostctl reads $FROST_TOKEN.
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


def prototype_check(frostctl, addr, data, head_device):
    """Trains, activates and queries a small prototype head on the served model; returns (ok, details)."""
    small = ["max_tokens=32", "d_h=32", "H=4", "m=3", "m_q=2", "K=4", "T=8", "L=2", "epochs_a=2", "epochs_b=2",
             "probe=none"]
    cmd = [frostctl, "--addr", addr, "train", "submit", "prototype", "--inline-jsonl", f"{data}/train.jsonl",
           "--label-min", "1", "--label-max", "5", "--activate", "--watch", "--json"]
    for kv in small:
        cmd += ["--set", kv]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = {"job_rc": p.returncode}
    if p.returncode != 0:
        out["error"] = p.stderr.strip()[-500:]
        return False, out
    job = json.loads(p.stdout.splitlines()[-1]).get("job", {})
    report = json.loads(job.get("report_json", "{}"))
    out.update(job_state=job.get("state"), artifact=job.get("artifact"),
               compute_device=report.get("compute_device"), train_seconds=job.get("finished_unix", 0) -
               job.get("started_unix", 0))
    texts = [json.loads(l)["text"] for l in open(f"{data}/test.jsonl").read().splitlines()[:4]]
    q = subprocess.run([frostctl, "--addr", addr, "predict", "--json", *texts], capture_output=True, text=True,
                       timeout=120)
    if q.returncode != 0:
        out["predict_error"] = q.stderr.strip()[-500:]
        return False, out
    results = json.loads(q.stdout.splitlines()[-1]).get("results", [])
    out["predictions"] = [r.get("value") for r in results]
    bounded = len(results) == len(texts) and all(1.0 <= r.get("value", 0) <= 5.0 and r.get("prototypes")
                                                  for r in results)
    info = subprocess.run([frostctl, "--addr", addr, "server-info", "--json"], capture_output=True, text=True)
    store = json.loads(info.stdout).get("store_bytes", {}) if info.returncode == 0 else {}
    out["store_bytes"] = store
    ok = (job.get("state") == "JOB_STATE_SUCCEEDED" and out["compute_device"] == head_device and bounded and
          int(store.get(head_device, 0)) > 0)
    return ok, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frostctl", required=True)
    ap.add_argument("--addr", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prototype-data", help="a dataset dir (train.jsonl, test.jsonl): run the prototype check")
    ap.add_argument("--head-device", default="cuda:0", help="where the prototype head must compute")
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
    if a.prototype_data:
        pok, res["prototype"] = prototype_check(a.frostctl, a.addr, a.prototype_data, a.head_device)
        res["ok"] &= pok
        pr = res["prototype"]
        print(f"prototype job on the served model: {pr.get('job_state')}, head on {pr.get('compute_device')} "
              f"(want {a.head_device}), predictions {pr.get('predictions')}, store {pr.get('store_bytes')}: "
              f"{'ok' if pok else 'FAILED'}")
    json.dump(res, open(a.out, "w"), indent=1)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
