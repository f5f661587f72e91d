"""The gateway test's frostd part (tests/deploy/k8s_gateway_test.py runs it): frostd on the gateway overlay's
rendered replica config, and every metric name and label the picker's config refers to checked against its
live /metrics (type, range), idle and under load; the render endpoints and /v1/models as the picker's
token-producer uses them (without a token: auth.open_render), and closed again without auth.open_render.
"""

import json
import threading

from k8s_common import *  # noqa: F401,F403
from k8s_frostd import Frostd, map_paths  # noqa: E402
from k8s_gateway_checks import kv_events_landed, metric_spec, plugin  # noqa: E402


def parse_exposition(text):
    """Prometheus text format -> {family: {"type": str, "samples": [(name, {label: value}, float)]}}."""
    fams = {}
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(None, 3)
            fams.setdefault(name, {"type": typ, "samples": []})["type"] = typ
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)", line)
        if not m:
            continue
        name, labels, value = m.group(1), dict(label_re.findall(m.group(2) or "")), float(m.group(3))
        fam = name if name in fams else re.sub(r"_(bucket|sum|count|total)$", "", name)
        fams.setdefault(fam, {"type": "untyped", "samples": []})["samples"].append((name, labels, value))
    return fams


def picked(fams, spec):
    """The samples the picker's metric spec selects: (type, [(labels, value)]); type None when absent."""
    name, want = metric_spec(spec)
    fam = fams.get(name)
    if fam is None:
        return None, []
    return fam["type"], [(l, v) for n, l, v in fam["samples"] if n == name and all(l.get(k) == x for k, x in want.items())]


def check_engine_metrics(c, fams, engine, tag, block_size=None):
    """Every metric the engine config names exists with the semantics the picker expects."""
    for key, what in (("queuedRequestsSpec", "queued requests"), ("runningRequestsSpec", "running requests")):
        typ, samples = picked(fams, engine[key])
        c.check(typ == "gauge" and len(samples) == 1 and samples[0][1] >= 0 and samples[0][1] == int(samples[0][1]),
                f"{tag}: {engine[key]} ({what}) is one gauge sample, a count >= 0", f"{typ} {samples}")
    typ, samples = picked(fams, engine["kvUsageSpec"])
    c.check(typ == "gauge" and len(samples) == 1 and 0 <= samples[0][1] <= 1,
            f"{tag}: {engine['kvUsageSpec']} (KV utilisation) is one gauge sample in [0, 1]", f"{typ} {samples}")
    typ, samples = picked(fams, engine["cacheInfoSpec"])
    bs_label = engine.get("cacheBlockSizeLabelName") or "block_size"
    nb_label = engine.get("cacheNumBlocksLabelName") or "num_gpu_blocks"
    labels = samples[0][0] if len(samples) == 1 else {}
    ints = all(re.fullmatch(r"[1-9][0-9]*", labels.get(k, "")) for k in (bs_label, nb_label))
    c.check(typ == "gauge" and len(samples) == 1 and ints,
            f"{tag}: {engine['cacheInfoSpec']} is an info gauge with positive integers in labels {bs_label}, {nb_label}",
            f"{typ} {samples}")
    if ints:
        blocks = sum(v for n, l, v in fams.get("frost_kv_cache_blocks", {}).get("samples", []))
        c.check(int(labels[nb_label]) == blocks, f"{tag}: {nb_label} = the pool's blocks (frost_kv_cache_blocks summed)",
                f"{labels[nb_label]} vs {blocks}")
        if block_size is not None:
            c.check(int(labels[bs_label]) == block_size, f"{tag}: {bs_label} = the picker's blockSizeTokens {block_size} "
                    "(fp32 KV cache on the CPU)", labels[bs_label])
    return samples


def post(port, path, body, token):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read().decode() or "null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def run_live(c, binary, info, tmp):
    inf, cfg, engine = info["inference"], info["picker_config"], info["engine"]
    print("[frostd] the rendered replica config, its /metrics against the picker's config")
    tokens = os.path.join(tmp, "vol-frost-tokens")
    os.makedirs(tokens)
    for k, v in (("admin-token", ADMIN_TOKEN), ("user-token", USER_TOKEN)):
        with open(os.path.join(tokens, k), "w") as f:
            f.write(v + "\n")
    state = os.path.join(tmp, "vol-frost-state")
    os.makedirs(state)
    run_cfg, args, unmapped = map_paths(inf, {("Secret", "frost-tokens"): tokens,
                                              ("PersistentVolumeClaim", "frost-state"): state})
    if not c.check(not unmapped, "every path of the replicas' config lies on a mounted volume", str(unmapped)):
        return
    with open(DEFAULT_CONFIG) as f:
        default_keys = set(flatten(yaml.safe_load(f)))
    if not kv_events_landed(default_keys) and "kv_events" in run_cfg.get("server", {}):
        # Until the publisher lands, frostd would refuse the unknown keys: run without them, say so.
        print("  note  server.kv_events is not in configs/default.yaml yet: frostd runs without it (the publisher "
              "lands separately); every other key as rendered")
        del run_cfg["server"]["kv_events"]
    cfg_path = os.path.join(tmp, "inference.yaml")
    with open(cfg_path, "w") as f:
        yaml.safe_dump(run_cfg, f, sort_keys=False)
    p = Frostd(binary, cfg_path, args, SOURCE_DIR, tmp, "gateway-replica", http=True)
    try:
        if not c.check(p.wait_ports(60) and p.wait_ready(None, 120), "frostd starts on the rendered config and turns ready",
                       p.output()[-3000:]):
            return
        fams = parse_exposition(p.metrics())
        bs = (plugin(cfg, "precise-prefix-cache-producer") or [{}])[0].get("parameters", {}).get(
            "tokenProcessorConfig", {}).get("blockSizeTokens")
        check_engine_metrics(c, fams, engine, "idle", bs)
        max_running = picked(fams, "frost_engine_max_running")[1][0][1]

        # /v1/models: the served name is what the picker's token-producer and the KV-events topic name.
        tok = (plugin(cfg, "token-producer") or [{}])[0].get("parameters", {})
        status, body = p.http_get("/v1/models", USER_TOKEN)
        ids = [m["id"] for m in json.loads(body).get("data", [])] if status == 200 else []
        c.check(tok.get("modelName") in ids, f"GET /v1/models serves {tok.get('modelName')!r}, the token-producer's "
                "modelName", f"{status} {ids}")
        # The render endpoints in the shapes the token-producer decodes: completions -> a list of {token_ids},
        # chat -> one {token_ids}; the body forwarded as the client sent it, model set to modelName.
        status, r = post(p.ports["http"], "/v1/completions/render", {"model": tok.get("modelName"),
                                                                    "prompt": "Once upon a time"}, USER_TOKEN)
        c.check(status == 200 and isinstance(r, list) and len(r) == 1 and r[0]["token_ids"] and
                all(isinstance(t, int) for t in r[0]["token_ids"]),
                "POST /v1/completions/render answers [{token_ids: [ints]}] (what the token-producer reads)", f"{status} {r}")
        status, r = post(p.ports["http"], "/v1/chat/completions/render",
                         {"model": tok.get("modelName"), "messages": [{"role": "user", "content": "Hello"}]}, USER_TOKEN)
        c.check(status == 200 and isinstance(r, dict) and r.get("token_ids") and
                all(isinstance(t, int) for t in r["token_ids"]),
                "POST /v1/chat/completions/render answers {token_ids: [ints]}", f"{status} {r}")
        # The picker sends no token: auth.open_render lets the two render endpoints answer it; nothing else.
        status, r = post(p.ports["http"], "/v1/completions/render", {"model": tok.get("modelName"), "prompt": "x"},
                         None)
        c.check(status == 200 and isinstance(r, list) and r[0]["token_ids"],
                "POST /v1/completions/render answers without a token (auth.open_render), as the picker calls it",
                f"{status} {r}")
        status, r = post(p.ports["http"], "/v1/chat/completions/render",
                         {"model": tok.get("modelName"), "messages": [{"role": "user", "content": "x"}]}, None)
        c.check(status == 200 and isinstance(r, dict) and r.get("token_ids"),
                "POST /v1/chat/completions/render answers without a token (auth.open_render)", f"{status} {r}")
        for path, body in (("/v1/completions", {"prompt": "x", "max_tokens": 1}), ("/tokenize", {"prompt": "x"})):
            status, _ = post(p.ports["http"], path, body, None)
            c.check(status == 401, f"POST {path} still needs the token (auth.require_for_inference)", str(status))
        status, _ = p.http_get("/v1/models")
        c.check(status == 401, "GET /v1/models still needs the token", str(status))

        # Under load: several streams at once; every scrape keeps the semantics, the running count its bound.
        results = []

        def stream(i):
            results.append(post(p.ports["http"], "/v1/completions",
                                {"model": tok.get("modelName"), "prompt": f"Once upon a time {i}", "max_tokens": 200,
                                 "temperature": 0}, USER_TOKEN)[0])
        threads = [threading.Thread(target=stream, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        seen_busy, scrapes = False, 0
        while any(t.is_alive() for t in threads):
            fams = parse_exposition(p.metrics())
            scrapes += 1
            run = picked(fams, engine["runningRequestsSpec"])[1]
            kv = picked(fams, engine["kvUsageSpec"])[1]
            if run and kv and (run[0][1] > max_running or not 0 <= kv[0][1] <= 1):
                c.fail("under load: running <= engine.max_running and KV utilisation in [0, 1]", f"{run} {kv}")
                break
            seen_busy = seen_busy or (run and run[0][1] > 0 and kv and kv[0][1] > 0)
        for t in threads:
            t.join()
        c.check(results == [200] * 6, "six concurrent completions succeed", str(results))
        check_engine_metrics(c, parse_exposition(p.metrics()), engine, "after load")
        print(f"  note  {scrapes} scrapes under load; running requests and KV utilisation seen above 0: {seen_busy}")
    finally:
        rc = p.stop(inf.effective["server"]["drain_timeout_s"] + 15)
        c.check(rc == 0, "SIGTERM stops frostd with exit 0", f"rc {rc}\n{p.output()[-1500:]}")
    check_render_closed_by_default(c, binary, tokens, tmp)


def check_render_closed_by_default(c, binary, tokens, tmp):
    """Without auth.open_render (configs/default.yaml: false) the render endpoints keep the inference rule."""
    cfg_path = os.path.join(tmp, "closed.yaml")
    with open(cfg_path, "w") as f:
        yaml.safe_dump({"auth": {"user_token_file": os.path.join(tokens, "user-token"),
                                 "admin_token_file": os.path.join(tokens, "admin-token"),
                                 "require_for_inference": True},
                        "engine": {"kv_cache_bytes": "64MiB"}, "model": {"threads": 1}}, f)
    p = Frostd(binary, cfg_path, [], SOURCE_DIR, tmp, "closed", http=True)
    try:
        if not c.check(p.wait_ports(60) and p.wait_ready(None, 120), "frostd (auth.open_render off) turns ready",
                       p.output()[-2000:]):
            return
        body = {"model": "stories260K", "prompt": "Once upon a time"}
        status, _ = post(p.ports["http"], "/v1/completions/render", body, None)
        ok_status, _ = post(p.ports["http"], "/v1/completions/render", body, USER_TOKEN)
        c.check(status == 401 and ok_status == 200, "without auth.open_render the render endpoints need the token "
                "under auth.require_for_inference (401 without, 200 with)", f"{status} / {ok_status}")
    finally:
        p.stop(30)
