"""The gateway overlay's manifest checks (tests/deploy/k8s_gateway_test.py runs them): the InferencePool, the
endpoint picker (Deployment, Service, RBAC, its EndpointPickerConfig), the Gateway and HTTPRoute, the
NetworkPolicy openings, the HPA against what the picker reads, the replicas' config against the base's, and
that the CRD schemas reject broken objects.
"""

from k8s_common import *  # noqa: F401,F403
from k8s_render import *  # noqa: F401,F403

GATEWAY_DIR = os.path.join(K8S_DIR, "overlays", "gateway")
CRDS_DIR = os.path.join(SOURCE_DIR, "tests", "deploy", "data", "crds")
ENGINE = "frost"
# The KV-events publisher's keys (issue 53 part 2, built beside this overlay): allowed in the overlay's config
# while configs/default.yaml has no server.kv_events section; once it has one, the overlay's keys must be its
# keys like every other key (and the live part runs frostd with them).
PENDING_KV_EVENTS = {"server.kv_events.endpoint", "server.kv_events.replay_endpoint", "server.kv_events.topic"}


def kv_events_landed(default_keys):
    return any(k.startswith("server.kv_events.") for k in default_keys)
# The picker's metric-name flags: deprecated for engineConfigs, and refused by the picker once set.
DEPRECATED_FLAGS = ("--total-queued-requests-metric", "--total-running-requests-metric",
                    "--kv-cache-usage-percentage-metric", "--lora-info-metric", "--cache-info-metric")
PICKER_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker"


def validate_crds(modules, text, quiet=True, crds=True):
    """validate.mjs with the upstream CRDs kept as test data; returns (rc, output)."""
    cmd = ["node", VALIDATOR, "--modules", modules] + (["--crds", CRDS_DIR] if crds else []) + \
        (["--quiet"] if quiet else []) + ["-"]
    r = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip()


def metric_spec(spec):
    """The picker's metric selector syntax, name{label=value,...}: (name, {label: value})."""
    m = re.fullmatch(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{([^}]*)\})?\s*", spec or "")
    if not m:
        return None, {}
    labels = {}
    for pair in filter(None, (p.strip() for p in (m.group(2) or "").split(","))):
        k, v = pair.split("=", 1)
        labels[k.strip()] = v.strip().strip('"')
    return m.group(1), labels


def pod_labels_of(workload):
    return workload["spec"]["template"]["metadata"].get("labels", {})


def picker_config(objs, picker):
    """(EndpointPickerConfig, its path) of the ConfigMap key the picker's --config-file names."""
    ctr = picker["spec"]["template"]["spec"]["containers"][0]
    args = ctr.get("args", [])
    path = next((a.split("=", 1)[1] for a in args if a.startswith("--config-file=")), arg_value(args, "--config-file"))
    m = mount_for(ctr, path or "/nonexistent")
    v = volume(picker, m["name"]) if m else None
    cm = index(objs).get(("ConfigMap", v["configMap"]["name"])) if v and "configMap" in v else None
    text = (cm or {}).get("data", {}).get(os.path.relpath(path, m["mountPath"])) if m else None
    return (yaml.safe_load(text) if text else None), path


def plugin(cfg, type_):
    """The plugins of a type in an EndpointPickerConfig (their name defaults to the type)."""
    return [p for p in cfg.get("plugins", []) if p.get("type") == type_]


def flag(args, name):
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def policy_admits(objs, ns, dest_labels, src_labels, src_ns_labels, port):
    """True when some NetworkPolicy selecting the destination pods admits ingress from the source on port."""
    for np in by_kind(objs, "NetworkPolicy"):
        if np["metadata"].get("namespace") != ns or not matches_all(np["spec"]["podSelector"], dest_labels):
            continue
        for rule in np["spec"].get("ingress", []):
            if not any(p.get("port") == port for p in rule.get("ports", [])):
                continue
            for peer in rule.get("from", []):
                if peer_matches(peer, src_labels, src_ns_labels, ns):
                    return True
    return False


def egress_admits(objs, ns, src_labels, dest_labels, port):
    """True when every policy with Egress selecting the source lets it reach the destination pods on port
    (the source's egress is open where no such policy exists)."""
    policies = [np for np in by_kind(objs, "NetworkPolicy") if np["metadata"].get("namespace") == ns and
                "Egress" in np["spec"].get("policyTypes", []) and matches_all(np["spec"]["podSelector"], src_labels)]
    if not policies:
        return True
    for np in policies:
        for rule in np["spec"].get("egress", []):
            if rule.get("ports") and not any(p.get("port") == port for p in rule["ports"]):
                continue
            if not rule.get("to") or any(peer_matches(p, dest_labels, {"kubernetes.io/metadata.name": ns}, ns)
                                         for p in rule["to"]):
                return True
    return False


def matches_all(selector, labels):
    """A label selector (matchLabels only; {} selects every pod) against labels."""
    ml = (selector or {}).get("matchLabels", {})
    return all(labels.get(k) == v for k, v in ml.items()) and not (selector or {}).get("matchExpressions")


def peer_matches(peer, labels, ns_labels, policy_ns):
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        if not matches_all(peer["namespaceSelector"], ns_labels):
            return False
    elif ns_labels.get("kubernetes.io/metadata.name") != policy_ns:
        return False
    return "podSelector" not in peer or matches_all(peer["podSelector"], labels)


def check_gateway(c, objs, base_objs, defaults, default_keys):
    """The gateway overlay's invariants. Returns what the live part needs, or None."""
    print("[gateway] InferencePool, endpoint picker, HTTPRoute, NetworkPolicy, HPA")
    idx = index(objs)
    ns = by_kind(objs, "Namespace")[0]["metadata"]["name"]
    deps = {d["metadata"]["name"]: d for d in by_kind(objs, "Deployment")}
    if not c.check("frost-inference" in deps and "frost-picker" in deps,
                   "gateway: Deployments frost-inference and frost-picker exist", str(sorted(deps))):
        return None
    inf = Role("inference", deps["frost-inference"], objs, defaults)
    picker = deps["frost-picker"]
    inf_labels, picker_labels = pod_labels_of(inf.workload), pod_labels_of(picker)
    trainer_labels = pod_labels_of(by_kind(objs, "StatefulSet")[0])
    inf_ports = {p["name"]: p["containerPort"] for p in inf.container.get("ports", [])}

    # The replicas' config: the base's, plus the KV-events publisher and nothing else.
    base_inf = Role("inference", [d for d in by_kind(base_objs, "Deployment") if d["metadata"]["name"] ==
                                  "frost-inference"][0], base_objs, defaults)
    if c.check(inf.config is not None and base_inf.config is not None,
               "gateway: the replicas' config is a mounted ConfigMap key, as in the base"):
        mine = copy.deepcopy(inf.config)
        kv = mine.get("server", {}).pop("kv_events", None)
        open_render = mine.get("auth", {}).pop("open_render", None)
        c.check(mine == base_inf.config, "gateway: the replicas' config = the base's + server.kv_events and "
                "auth.open_render only (overlays/gateway/config/inference.yaml follows base/config/inference.yaml)",
                f"differs: {sorted(set(flatten(mine).items()) ^ set(flatten(base_inf.config).items()))}")
        c.check(bool(kv), "gateway: the replicas publish KV events (server.kv_events)")
        c.check(open_render is True and inf.effective["auth"]["require_for_inference"] is True,
                "gateway: the render endpoints answer the picker without a token (auth.open_render), everything "
                "else still needs one (auth.require_for_inference)")
        landed = kv_events_landed(default_keys)
        allowed = set(default_keys) | PENDING_KEYS | (set() if landed else PENDING_KV_EVENTS)
        if not landed:
            print("  note  configs/default.yaml has no server.kv_events yet: the overlay's "
                  f"{', '.join(sorted(PENDING_KV_EVENTS))} allowed (the KV-events publisher adds the section)")
        unknown = sorted(set(flatten(inf.config)) - allowed)
        c.check(not unknown, "gateway: every key of the replicas' config exists in configs/default.yaml",
                f"unknown: {unknown}")

    # The InferencePool: the replicas, their HTTP port, the picker.
    pools = by_kind(objs, "InferencePool")
    if not c.check(len(pools) == 1, "gateway: one InferencePool"):
        return None
    pool = pools[0]
    sel = pool["spec"]["selector"]
    c.check(matches(sel.get("matchLabels"), inf_labels) and not matches(sel.get("matchLabels"), trainer_labels) and
            not matches(sel.get("matchLabels"), picker_labels),
            "gateway: the InferencePool selects the inference replicas only (not the trainer, not the picker)", str(sel))
    ports = [p["number"] for p in pool["spec"]["targetPorts"]]
    c.check(ports == [inf.http_port] and inf_ports.get("http") == inf.http_port,
            f"gateway: the pool's targetPorts = [{inf.http_port}], the replicas' container port http "
            "(server.http.listen)", f"{ports} vs {inf_ports}")
    c.check(pool["spec"].get("appProtocol", "http") == "http", "gateway: the pool speaks HTTP/1.1 to the replicas")
    ref = pool["spec"]["endpointPickerRef"]
    svc = idx.get(("Service", ref["name"]))
    picker_ctr = picker["spec"]["template"]["spec"]["containers"][0]
    args = picker_ctr.get("args", [])
    ext_proc = int(flag(args, "--grpc-port") or 9002)
    picker_ports = {p["name"]: p["containerPort"] for p in picker_ctr.get("ports", [])}
    svc_port = [p for p in (svc or {"spec": {"ports": []}})["spec"]["ports"] if p["port"] == ref["port"]["number"]]
    c.check(ref.get("kind", "Service") == "Service" and svc is not None and
            matches(svc["spec"].get("selector"), picker_labels) and len(svc_port) == 1 and
            picker_ports.get(svc_port[0]["targetPort"]) == ext_proc,
            f"gateway: endpointPickerRef -> Service {ref['name']}:{ref['port']['number']} -> the picker's ext-proc "
            f"port {ext_proc} (--grpc-port)", f"{ref} / {svc_port} / {picker_ports}")
    c.check(ref.get("failureMode") == "FailOpen", "gateway: failureMode FailOpen (the pool serves while the picker "
            "restarts)", str(ref.get("failureMode")))

    # The picker's Deployment: the pool it serves, image, RBAC, security.
    c.check(flag(args, "--pool-name") == pool["metadata"]["name"] and
            flag(args, "--pool-group") in (None, "inference.networking.k8s.io"),
            "gateway: the picker serves this pool (--pool-name, --pool-group)", str(args))
    pns = flag(args, "--pool-namespace")
    env = {e["name"]: e for e in picker_ctr.get("env", [])}
    c.check(pns == ns or (pns == "$(NAMESPACE)" and env.get("NAMESPACE", {}).get("valueFrom", {}).get(
        "fieldRef", {}).get("fieldPath") == "metadata.namespace"),
        "gateway: --pool-namespace is the pool's namespace (the pod's own, from the downward API)", str(pns))
    bad_flags = [a for a in args if a.split("=", 1)[0] in DEPRECATED_FLAGS]
    c.check(not bad_flags, "gateway: no deprecated metric-name flags (the picker refuses them; engineConfigs "
            "name frost's metrics)", str(bad_flags))
    image = picker_ctr["image"]
    c.check(re.fullmatch(re.escape(PICKER_IMAGE) + r":v\d+\.\d+\.\d+(@sha256:[0-9a-f]{64})?", image) is not None,
            f"gateway: the picker image is pinned to a release tag of {PICKER_IMAGE}", image)
    sa = picker["spec"]["template"]["spec"].get("serviceAccountName")
    c.check(("ServiceAccount", sa) in idx, f"gateway: the picker's ServiceAccount {sa} exists")
    granted = set()
    for rb in by_kind(objs, "RoleBinding"):
        if any(s.get("kind") == "ServiceAccount" and s.get("name") == sa for s in rb.get("subjects", [])):
            role = idx.get((rb["roleRef"]["kind"], rb["roleRef"]["name"]))
            for rule in (role or {}).get("rules", []):
                for g in rule.get("apiGroups", []):
                    for r in rule.get("resources", []):
                        for v in rule.get("verbs", []):
                            granted.add((g, r, v))
    need = {(g, r, v) for g, r in (("inference.networking.k8s.io", "inferencepools"), ("", "pods"))
            for v in ("get", "list", "watch")}
    c.check(need <= granted, "gateway: the picker may get/list/watch inferencepools and pods in its namespace",
            f"missing {sorted(need - granted)}")
    c.check(not any(v in ("create", "update", "patch", "delete", "*") for _, _, v in granted),
            "gateway: the picker's Role is read-only (one replica, no leader election)", str(sorted(granted)))
    psc, csc = picker["spec"]["template"]["spec"].get("securityContext", {}), picker_ctr.get("securityContext", {})
    c.check(psc.get("runAsNonRoot") is True and csc.get("readOnlyRootFilesystem") is True and
            csc.get("allowPrivilegeEscalation") is False and "ALL" in csc.get("capabilities", {}).get("drop", []) and
            psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
            "gateway: the picker meets the restricted Pod Security Standard the namespace enforces")
    for probe in ("livenessProbe", "readinessProbe"):
        p = picker_ctr.get(probe, {}).get("grpc", {})
        c.check(p.get("port") == int(flag(args, "--grpc-health-port") or 9003),
                f"gateway: the picker's {probe} is gRPC on --grpc-health-port", str(p))

    # The picker's config: metric names for frost, the scorers, KV events, the tokenizer.
    cfg, cfg_path = picker_config(objs, picker)
    if not c.check(cfg is not None and cfg.get("kind") == "EndpointPickerConfig",
                   f"gateway: --config-file {cfg_path} is an EndpointPickerConfig in a mounted ConfigMap"):
        return None
    names = {p.get("name") or p["type"] for p in cfg.get("plugins", [])}
    refs = [p["pluginRef"] for prof in cfg.get("schedulingProfiles", []) for p in prof.get("plugins", [])]
    refs += [e["pluginRef"] for s in cfg.get("dataLayer", {}).get("sources", []) for e in [s] + s.get("extractors", [])]
    c.check(set(refs) <= names, "gateway: every pluginRef names a plugin of the config", str(set(refs) - names))
    profile = {p["pluginRef"] for p in cfg["schedulingProfiles"][0]["plugins"]}
    for scorer in ("queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"):
        c.check(any((p.get("name") or p["type"]) in profile for p in plugin(cfg, scorer)),
                f"gateway: the scheduling profile scores with {scorer}")
    pcs = plugin(cfg, "prefix-cache-scorer")
    c.check(pcs and pcs[0].get("parameters", {}).get("prefixMatchInfoProducerName") == "precise-prefix-cache-producer"
            and plugin(cfg, "precise-prefix-cache-producer"),
            "gateway: the prefix scorer reads the precise (KV-events) producer, not the approximate one")
    ext = (plugin(cfg, "core-metrics-extractor") or [{}])[0].get("parameters", {})
    label_key = ext.get("engineLabelKey", "llm-d.ai/engine-type")
    engines = {e["name"]: e for e in ext.get("engineConfigs", [])}
    c.check(inf_labels.get(label_key) == ENGINE and ENGINE in engines,
            f"gateway: the replicas' pods carry {label_key}: {ENGINE}, the engine config naming frost's metrics",
            f"{inf_labels.get(label_key)!r}, engines {sorted(engines)}")
    engine = engines.get(ENGINE, {})
    for key in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "cacheInfoSpec"):
        c.check(metric_spec(engine.get(key))[0] is not None, f"gateway: engine config frost sets {key}",
                str(engine.get(key)))
    src = (plugin(cfg, "metrics-data-source") or [{}])[0].get("parameters", {})
    c.check(src.get("port") == inf.metrics_port and src.get("path", "/metrics") == "/metrics" and
            src.get("scheme", "http") == "http",
            f"gateway: the picker scrapes http://<pod>:{inf.metrics_port}/metrics (server.metrics_listen), not the "
            "pool's port", str(src))
    kvp = (plugin(cfg, "precise-prefix-cache-producer") or [{}])[0].get("parameters", {})
    kve = kvp.get("kvEventsConfig", {})
    pd = kve.get("podDiscoveryConfig", {})
    kv_cfg = inf.effective["server"].get("kv_events", {})
    pub, replay = kv_cfg.get("endpoint", ""), kv_cfg.get("replay_endpoint", "")
    c.check(kve.get("discoverPods") is True and pub.endswith(f":{pd.get('socketPort')}") and
            replay.endswith(f":{pd.get('replaySocketPort')}") and
            inf_ports.get("kv-events") == pd.get("socketPort") and inf_ports.get("kv-replay") == pd.get("replaySocketPort"),
            "gateway: the picker dials each replica's KV events where frostd binds them (server.kv_events "
            "endpoint / replay_endpoint = podDiscoveryConfig ports = container ports kv-events / kv-replay)",
            f"{kv_cfg} vs {pd} vs {inf_ports}")
    topic = kv_cfg.get("topic", "")
    tok = (plugin(cfg, "token-producer") or [{}])[0].get("parameters", {})
    c.check(topic.startswith(kve.get("topicFilter", "kv@")) and topic.count("@") == 2 and
            topic.rsplit("@", 1)[1] == tok.get("modelName"),
            "gateway: the KV-events topic is kv@<pod>@<model>, its model = the token-producer's modelName",
            f"{topic!r}, filter {kve.get('topicFilter')!r}, modelName {tok.get('modelName')!r}")
    m = re.fullmatch(r"http://([a-z0-9-]+)(?:\.[a-z0-9.-]+)?:(\d+)", (tok.get("vllm") or {}).get("url", ""))
    rsvc = idx.get(("Service", m.group(1))) if m else None
    rport = [p for p in (rsvc or {"spec": {"ports": []}})["spec"]["ports"] if m and p["port"] == int(m.group(2))]
    c.check(rsvc is not None and matches(rsvc["spec"].get("selector"), inf_labels) and len(rport) == 1 and
            inf_ports.get(rport[0]["targetPort"]) == inf.http_port,
            "gateway: the token-producer calls the replicas' render endpoints through a Service of the render",
            str(tok.get("vllm")))

    # Gateway and HTTPRoute.
    routes = by_kind(objs, "HTTPRoute")
    backends = [b for r in routes for rule in r["spec"].get("rules", []) for b in rule.get("backendRefs", [])]
    pool_rules = [rule for r in routes for rule in r["spec"].get("rules", []) if any(
        b.get("group") == "inference.networking.k8s.io" and b.get("kind") == "InferencePool" and
        b["name"] == pool["metadata"]["name"] for b in rule.get("backendRefs", []))]
    paths = {(m.get("path", {}).get("type"), m.get("path", {}).get("value")) for rule in pool_rules
             for m in rule.get("matches", [])}
    want = {("Exact", p) for p in ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/embeddings")}
    c.check(paths == want, "gateway: the HTTPRoute sends frost's generating endpoints (exact paths) to the "
            "InferencePool", str(sorted(paths)))
    routed = {(m.get("path", {}).get("type"), m.get("path", {}).get("value")) for r in routes
              for rule in r["spec"].get("rules", []) for m in rule.get("matches", [])}
    c.check(not any(t != "Exact" or "render" in v or "tokenize" in v for t, v in routed),
            "gateway: the HTTPRoute routes no render / tokenize endpoint (open to the picker without a token)",
            str(sorted(routed)))
    svc_refs = [b for r in routes for rule in r["spec"].get("rules", []) for b in rule.get("backendRefs", [])
                if b.get("kind") == "Service"]
    c.check(all(("Service", b["name"]) in idx and b.get("port") == inf.http_port for b in svc_refs),
            "gateway: the HTTPRoute's Service backends are Services of the render on the HTTP port", str(svc_refs))
    parents = [p for r in routes for p in r["spec"].get("parentRefs", [])]
    c.check(parents and all(("Gateway", p["name"]) in idx for p in parents),
            "gateway: the HTTPRoute's parentRefs name the Gateway of the render", str(parents))

    # NetworkPolicy: every connection the gateway path makes is admitted, at both ends.
    gw_labels = {"gateway.networking.k8s.io/gateway-name": parents[0]["name"] if parents else "?"}
    same_ns = {"kubernetes.io/metadata.name": ns}
    flows = [("the gateway's proxies", gw_labels, "replicas", inf_labels, inf.http_port),
             ("the gateway's proxies", gw_labels, "picker", picker_labels, ext_proc)]
    flows += [("the picker", picker_labels, "replicas", inf_labels, p)
              for p in (inf.http_port, inf.metrics_port, pd.get("socketPort"), pd.get("replaySocketPort"))]
    for src_name, src_l, dst_name, dst_l, port in flows:
        c.check(policy_admits(objs, ns, dst_l, src_l, same_ns, port) and egress_admits(objs, ns, src_l, dst_l, port),
                f"gateway: NetworkPolicy lets {src_name} reach the {dst_name} on {port} (ingress and egress)")
    c.check(not egress_admits(objs, ns, inf_labels, picker_labels, ext_proc),
            "gateway: the replicas still have no egress (the picker dials in, KV events included)")

    # The HPA scales on what the picker also routes by: the replicas' queue.
    hpa = by_kind(objs, "HorizontalPodAutoscaler")[0]
    hpa_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"].get("metrics", []) if m.get("type") == "Pods"]
    c.check(hpa_metrics == [metric_spec(engine.get("queuedRequestsSpec"))[0]],
            "gateway: the HPA's metric is the queue length the picker reads (queuedRequestsSpec)",
            f"{hpa_metrics} vs {engine.get('queuedRequestsSpec')}")
    return {"inference": inf, "picker_config": cfg, "engine": engine}


def check_schemas(c, modules, objs):
    """One validator run over the render and broken copies of the pool, route and gateway: every object of the
    render must pass, strictly, the custom resources against the upstream CRDs, and every broken copy fail."""
    print("[schema] the render, and broken custom resources that must fail")
    pool = by_kind(objs, "InferencePool")[0]
    route = by_kind(objs, "HTTPRoute")[0]
    gw = by_kind(objs, "Gateway")[0]

    def broken(obj, mutate):
        o = copy.deepcopy(obj)
        mutate(o)
        return o

    cases = [
        ("unknown field in an InferencePool", broken(pool, lambda o: o["spec"].__setitem__("targetPort", 8000)),
         'unknown field "targetPort"'),
        ("string for an integer port", broken(pool, lambda o: o["spec"]["targetPorts"][0].__setitem__("number", "8000")),
         "must be integer"),
        ("port out of range", broken(pool, lambda o: o["spec"]["targetPorts"][0].__setitem__("number", 70000)),
         "must be <= 65535"),
        ("bad failureMode", broken(pool, lambda o: o["spec"]["endpointPickerRef"].__setitem__("failureMode", "Open")),
         "allowed values"),
        ("missing selector", broken(pool, lambda o: o["spec"].pop("selector")), "selector"),
        ("alpha InferencePool", broken(pool, lambda o: o.__setitem__("apiVersion", "inference.networking.x-k8s.io/v1alpha2")),
         "not a stable API"),
        ("unknown field in an HTTPRoute backendRef",
         broken(route, lambda o: o["spec"]["rules"][0]["backendRefs"][0].__setitem__("weigth", 1)), 'unknown field "weigth"'),
        ("bad path match type", broken(route, lambda o: o["spec"]["rules"][0]["matches"][0]["path"].__setitem__(
            "type", "Prefix")), "allowed values"),
        ("Gateway listener without a port", broken(gw, lambda o: o["spec"]["listeners"][0].pop("port")), "port"),
    ]
    docs = []
    for i, (_, o, _) in enumerate(cases):
        o["metadata"]["name"] = f"broken-{i}"
        docs.append(o)
    rc, out = validate_crds(modules, yaml.safe_dump_all(objs + docs), quiet=False)
    blocks = validator_blocks(out)
    good = {(o["kind"], o["metadata"]["name"]) for o in objs}
    oks = {(m.group(1), m.group(2)) for m in re.finditer(r"^ok +\S+ (\S+) (?:\S+/)?(\S+)$", out, re.M)}
    c.check(good <= oks, "gateway: every object of the render is valid, strict (Kubernetes v1.36 schemas; "
            "InferencePool, Gateway, HTTPRoute against the upstream CRDs in tests/deploy/data/crds)",
            f"not ok: {sorted(good - oks)}\n{out}")
    print(f"        {out.splitlines()[-1]}")
    c.check(rc == 1, "validator exits 1 on broken custom resources", f"rc {rc}")
    for i, (what, _, expect) in enumerate(cases):
        b = blocks.get(f"broken-{i}", ["missing"])
        c.check(b[0] == "FAIL" and any(expect in e for e in b[1:]), f"validator rejects: {what}",
                f"expected an error containing {expect!r}, got: {b}\n{out}")
