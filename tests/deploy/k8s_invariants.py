"""The k8s test's manifest checks: the invariants of one render, the role configs against
configs/default.yaml, the HPA's metric against frostd's sources, and that validation is strict.
"""

from k8s_common import *  # noqa: F401,F403
from k8s_render import *  # noqa: F401,F403


# ------------------------------------------------------------------------------------------------
# Invariants of one render.

def check_render(c, label, objs, defaults, expect_gpu, placeholder_tokens):
    print(f"[{label}] invariants")
    idx = index(objs)
    kinds = {o["kind"] for o in objs}
    for kind in ("Namespace", "ServiceAccount", "ConfigMap", "Secret", "Service", "PersistentVolumeClaim",
                 "Deployment", "StatefulSet", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor",
                 "NetworkPolicy"):
        c.check(kind in kinds, f"{label}: renders a {kind}")

    nss = by_kind(objs, "Namespace")
    ns = nss[0]["metadata"]["name"] if nss else None
    stray = [f"{o['kind']}/{o['metadata']['name']}" for o in objs
             if o["kind"] != "Namespace" and o["metadata"].get("namespace") != ns]
    c.check(not stray, f"{label}: every object is in namespace {ns}", f"not in it: {stray}")
    if nss:
        c.check(nss[0]["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") == "restricted",
                f"{label}: namespace enforces the restricted Pod Security Standard")

    deps = [d for d in by_kind(objs, "Deployment") if d["metadata"]["name"] == "frost-inference"]
    stss = [s for s in by_kind(objs, "StatefulSet") if s["metadata"]["name"] == "frost-trainer"]
    if not c.check(deps and stss, f"{label}: Deployment frost-inference and StatefulSet frost-trainer exist"):
        return None
    inf = Role("inference", deps[0], objs, defaults)
    trn = Role("trainer", stss[0], objs, defaults)

    for role in (inf, trn):
        w, ctr, spec = role.workload, role.container, role.workload["spec"]["template"]["spec"]
        who = f"{label}: {w['kind']} {w['metadata']['name']}"
        if not c.check(bool(ctr), f"{who}: has the container frostd"):
            continue
        tmpl_labels = w["spec"]["template"]["metadata"].get("labels", {})
        c.check(matches(w["spec"]["selector"].get("matchLabels"), tmpl_labels), f"{who}: selector matches its pod labels",
                f"{w['spec']['selector']} vs {tmpl_labels}")
        c.check(ctr["image"].split("@")[0].rsplit(":", 1)[0].endswith("frost"), f"{who}: runs the frost image", ctr["image"])
        c.check(role.args[:2] == ["--config", "/etc/frost/frost.yaml"],
                f"{who}: runs frostd --config /etc/frost/frost.yaml", str(role.args))
        if not c.check(role.config is not None, f"{who}: --config names a key of a mounted ConfigMap in the render",
                       str(role.config_path)):
            continue

        # Ports: the container's, the probes' and the config's agree.
        ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
        grpc_port, metrics_port = role.grpc_port, role.metrics_port
        c.check(ports.get("grpc") == grpc_port, f"{who}: port grpc = server.listen's port {grpc_port}", str(ports))
        c.check(ports.get("metrics") == metrics_port, f"{who}: port metrics = server.metrics_listen's port {metrics_port}",
                str(ports))
        # The OpenAI HTTP API: a container port http exactly when the config turns server.http.listen on, on
        # every interface (the Service reaches the pod IP, not loopback).
        if role.http_port is not None:
            c.check(ports.get("http") == role.http_port, f"{who}: port http = server.http.listen's port {role.http_port}",
                    str(ports))
            c.check(role.http_listen.rsplit(":", 1)[0] in ("0.0.0.0", "[::]", ""),
                    f"{who}: server.http.listen {role.http_listen!r} is reachable from outside the pod")
        else:
            c.check("http" not in ports, f"{who}: no container port http (server.http.listen is off)", str(ports))

        # Probes: native gRPC, liveness on "", readiness and startup on frost.v1.Generation.
        for probe, service in (("livenessProbe", ""), ("readinessProbe", READINESS_SERVICE),
                               ("startupProbe", READINESS_SERVICE)):
            p = ctr.get(probe)
            ok = p is not None and "grpc" in p and p["grpc"].get("port") == grpc_port and \
                p["grpc"].get("service", "") == service
            c.check(ok, f"{who}: {probe} is gRPC on port {grpc_port}, service {service!r}", str(p))
        sp = ctr.get("startupProbe") or {}
        c.check(sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3) >= 300,
                f"{who}: startupProbe allows >= 5 min for the model load", str(sp))

        # Shutdown: grace period > preStop + drain.
        pre = ctr.get("lifecycle", {}).get("preStop", {})
        pre_s = pre.get("sleep", {}).get("seconds", 0)
        drain = role.effective["server"]["drain_timeout_s"]
        grace = spec.get("terminationGracePeriodSeconds", 30)
        c.check(bool(pre), f"{who}: has a preStop hook", str(pre))
        c.check(grace > pre_s + drain, f"{who}: terminationGracePeriodSeconds {grace} > preStop {pre_s} + "
                f"server.drain_timeout_s {drain}")

        # Security: restricted PSS, non-root, read-only root filesystem.
        psc, csc = spec.get("securityContext", {}), ctr.get("securityContext", {})
        c.check(csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True and
                csc.get("runAsUser", psc.get("runAsUser", 1)) != 0, f"{who}: runs as non-root")
        c.check(csc.get("readOnlyRootFilesystem") is True, f"{who}: readOnlyRootFilesystem")
        c.check(csc.get("allowPrivilegeEscalation") is False and "ALL" in csc.get("capabilities", {}).get("drop", []),
                f"{who}: no privilege escalation, all capabilities dropped")
        c.check((csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost"),
                f"{who}: seccomp RuntimeDefault")
        bad_vols = [v["name"] for v in spec.get("volumes", []) if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES]
        c.check(not bad_vols and not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")) and
                not any(p.get("hostPort") for p in ctr.get("ports", [])),
                f"{who}: only volume types and host settings the restricted standard admits", str(bad_vols))
        tmp_mount = mount_for(ctr, "/tmp")
        c.check(tmp_mount is not None and "emptyDir" in (volume(w, tmp_mount["name"]) or {}),
                f"{who}: writable /tmp (emptyDir) beside the read-only root")

        # Resources: sized, and the CPU limit matches frostd's threads.
        res = ctr.get("resources", {})
        c.check(all(res.get(s, {}).get(r) for s in ("requests", "limits") for r in ("cpu", "memory")),
                f"{who}: cpu and memory requests and limits", str(res))
        threads = role.effective["model"]["threads"]
        if role.effective["jobs"]["enabled"]:
            threads += role.effective["jobs"]["threads"] * role.effective["jobs"]["concurrency"]
        limit_cpu = res.get("limits", {}).get("cpu")
        c.check(limit_cpu is not None and threads == cpu_cores(limit_cpu),
                f"{who}: model.threads (+ jobs.threads x concurrency) = {threads} = the CPU limit {limit_cpu}")
        kv = quantity_bytes(role.effective["engine"]["kv_cache_bytes"])
        mem = quantity_bytes(res.get("limits", {}).get("memory", "0"))
        c.check(0 < kv and kv + (2 << 30) <= mem, f"{who}: engine.kv_cache_bytes is set and fits in the memory "
                f"limit with 2 GiB to spare (prefaulted at start)", f"{kv} vs {mem}")

        # References: mounts name volumes; volumes name objects of the render; the service account exists.
        vol_names = {v["name"] for v in spec.get("volumes", [])}
        missing_vols = [m["name"] for m in ctr.get("volumeMounts", []) if m["name"] not in vol_names]
        c.check(not missing_vols, f"{who}: every volumeMount names a volume", str(missing_vols))
        for v in spec.get("volumes", []):
            ref = (("ConfigMap", v["configMap"]["name"]) if "configMap" in v else
                   ("Secret", v["secret"]["secretName"]) if "secret" in v else
                   ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) if "persistentVolumeClaim" in v
                   else None)
            if ref:
                c.check(ref in idx, f"{who}: volume {v['name']} -> {ref[0]} {ref[1]} exists in the render")
        sa = spec.get("serviceAccountName", "default")
        c.check(("ServiceAccount", sa) in idx, f"{who}: ServiceAccount {sa} exists in the render")

        # Token files: under the mount of the Secret, named by its keys.
        for key in ("admin_token_file", "user_token_file"):
            path = role.effective["auth"][key]
            m = mount_for(ctr, path) if path else None
            v = volume(w, m["name"]) if m else None
            sec = idx.get(("Secret", v["secret"]["secretName"])) if v and "secret" in v else None
            keys = set((sec or {}).get("data", {})) | set((sec or {}).get("stringData", {}))
            c.check(sec is not None and os.path.relpath(path, m["mountPath"]) in keys,
                    f"{who}: auth.{key} {path!r} is a key of the mounted Secret", str(sorted(keys)))
        c.check(role.effective["auth"]["require_for_inference"] is True, f"{who}: auth.require_for_inference")

        # The model: an absolute path lies under a read-only mount.
        mp = role.model_path()
        if os.path.isabs(mp):
            m = mount_for(ctr, mp)
            c.check(m is not None and m.get("readOnly") is True, f"{who}: model {mp} is on a read-only mount")


    if inf.config is None or trn.config is None:
        return None

    # Training and artifacts: one writer, replicas follow read-only.
    c.check(trn.effective["jobs"]["enabled"] is True and inf.effective["jobs"]["enabled"] is False,
            f"{label}: jobs.enabled: trainer true, replicas false")
    c.check(trn.workload["spec"].get("replicas") == 1, f"{label}: the trainer StatefulSet has exactly 1 replica")
    state_dir = trn.effective["jobs"]["state_dir"]
    tm = mount_for(trn.container, state_dir)
    tv = volume(trn.workload, tm["name"]) if tm else None
    c.check(tv is not None and "persistentVolumeClaim" in tv and not tm.get("readOnly") and
            not tv["persistentVolumeClaim"].get("readOnly"),
            f"{label}: trainer jobs.state_dir {state_dir} is on a read-write PVC mount")
    dm = mount_for(trn.container, trn.effective["jobs"]["data_root"])
    c.check(dm is not None and dm is tm, f"{label}: trainer jobs.data_root is on the same volume")
    follow = inf.effective.get("artifacts", {}).get("follow_state_dir", "")
    c.check(follow == state_dir, f"{label}: replicas' artifacts.follow_state_dir = trainer's jobs.state_dir",
            f"{follow!r} vs {state_dir!r}")
    im = mount_for(inf.container, follow) if follow else None
    iv = volume(inf.workload, im["name"]) if im else None
    if c.check(iv is not None and tv is not None and "persistentVolumeClaim" in iv,
               f"{label}: replicas see the state directory through a PVC mount"):
        c.check(iv["persistentVolumeClaim"]["claimName"] == tv["persistentVolumeClaim"]["claimName"] and
                im["mountPath"] == tm["mountPath"], f"{label}: replicas mount the trainer's claim at the trainer's path")
        c.check(im.get("readOnly") is True and iv["persistentVolumeClaim"].get("readOnly") is True,
                f"{label}: replicas mount the state volume readOnly (mount and claim)")
        pvc = idx.get(("PersistentVolumeClaim", iv["persistentVolumeClaim"]["claimName"]))
        c.check(pvc is not None and "ReadWriteMany" in pvc["spec"].get("accessModes", []),
                f"{label}: the shared state claim is ReadWriteMany")
    c.check(inf.model_path() == trn.model_path(), f"{label}: trainer and replicas serve the same model",
            f"{trn.model_path()} vs {inf.model_path()}")
    gov = trn.workload["spec"].get("serviceName")
    gov_svc = idx.get(("Service", gov))
    c.check(gov_svc is not None and gov_svc["spec"].get("clusterIP") == "None" and
            matches(gov_svc["spec"].get("selector"), trn.workload["spec"]["template"]["metadata"]["labels"]),
            f"{label}: the StatefulSet's governing Service {gov} exists, headless, selecting the trainer")

    # GPU overlay or not.
    res = inf.container.get("resources", {})
    gpu = res.get("limits", {}).get("nvidia.com/gpu")
    node_sel = inf.workload["spec"]["template"]["spec"].get("nodeSelector", {})
    if expect_gpu:
        c.check(gpu is not None and int(gpu) >= 1, f"{label}: replicas have an nvidia.com/gpu limit", str(res))
        c.check(bool(node_sel), f"{label}: replicas have a nodeSelector for GPU nodes", str(node_sel))
    else:
        c.check(gpu is None and not node_sel, f"{label}: replicas ask for no GPU")
    c.check("nvidia.com/gpu" not in str(trn.container.get("resources")), f"{label}: the trainer asks for no GPU")
    # The image is the CPU build (Dockerfile: no nvcc, FROST_CUDA off): a config naming a CUDA device would
    # fail at start there (frostd refuses model.device cuda:N without a CUDA build).
    for r in (inf, trn):
        dev = r.effective["model"].get("device", "cpu")
        c.check(dev == "cpu", f"{label}: {r.name} model.device is cpu (the image is a CPU build)", repr(dev))

    # Services.
    pod_labels = {r.name: r.workload["spec"]["template"]["metadata"]["labels"] for r in (inf, trn)}
    for s in by_kind(objs, "Service"):
        name = s["metadata"]["name"]
        sel = s["spec"].get("selector", {})
        targets = [r for r in (inf, trn) if matches(sel, pod_labels[r.name])]
        if not c.check(len(targets) == 1, f"{label}: Service {name} selects the pods of exactly one workload", str(sel)):
            continue
        names = {p["name"] for p in targets[0].container.get("ports", [])}
        bad = [p for p in s["spec"]["ports"] if p.get("targetPort") not in names]
        c.check(not bad, f"{label}: Service {name} targets named container ports", str(bad))
    # The OpenAI HTTP API: the replicas serve it, the trainer does not, and the ClusterIP Service frost
    # carries it to the replicas' named container port http (HTTP/1.1 balances per connection there).
    c.check(inf.http_port is not None and trn.http_port is None,
            f"{label}: replicas serve the OpenAI HTTP API (server.http.listen), the trainer does not",
            f"replicas {inf.http_listen!r}, trainer {trn.http_listen!r}")
    fs = idx.get(("Service", "frost"))
    inf_ports = {p["name"]: p["containerPort"] for p in inf.container.get("ports", [])}
    hp = [p for p in (fs or {"spec": {"ports": []}})["spec"]["ports"] if p.get("name") == "http"]
    c.check(fs is not None and matches(fs["spec"].get("selector"), pod_labels["inference"]) and len(hp) == 1 and
            hp[0].get("targetPort") == "http" and "http" in inf_ports and inf.http_port is not None and
            hp[0].get("port") == inf.http_port and hp[0].get("appProtocol") == "http",
            f"{label}: Service frost port http {inf.http_port} -> the replicas' container port http (appProtocol http)",
            str(hp))
    hl = idx.get(("Service", "frost-headless"))
    c.check(hl is not None and hl["spec"].get("clusterIP") == "None" and
            matches(hl["spec"].get("selector"), pod_labels["inference"]) and
            any(p["port"] == inf.grpc_port and p.get("appProtocol") == "grpc" for p in hl["spec"]["ports"]),
            f"{label}: headless Service frost-headless publishes the replicas' gRPC port (client-side balancing)")

    # PodDisruptionBudget and HPA.
    pdbs = by_kind(objs, "PodDisruptionBudget")
    c.check(any(matches(p["spec"]["selector"].get("matchLabels"), pod_labels["inference"]) and
                not matches(p["spec"]["selector"].get("matchLabels"), pod_labels["trainer"]) for p in pdbs),
            f"{label}: a PodDisruptionBudget covers the replicas (only)")
    hpas = by_kind(objs, "HorizontalPodAutoscaler")
    hpa = hpas[0] if hpas else {"spec": {}}
    ref = hpa["spec"].get("scaleTargetRef", {})
    c.check(ref.get("kind") == "Deployment" and ref.get("apiVersion") == "apps/v1" and
            ("Deployment", ref.get("name")) in idx and ref.get("name") == inf.workload["metadata"]["name"],
            f"{label}: the HPA targets the Deployment frost-inference", str(ref))
    c.check("replicas" not in inf.workload["spec"], f"{label}: the Deployment leaves replicas to the HPA")
    pod_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"].get("metrics", []) if m.get("type") == "Pods"]
    c.check(len(pod_metrics) >= 1, f"{label}: the HPA scales on a per-pod custom metric", str(pod_metrics))

    # ServiceMonitor: selects Services that expose the metrics port, each workload exactly once.
    for sm in by_kind(objs, "ServiceMonitor"):
        sel = sm["spec"]["selector"].get("matchLabels", {})
        ports = {e.get("port") for e in sm["spec"].get("endpoints", [])}
        scraped = {}
        for s in by_kind(objs, "Service"):
            if matches(sel, s["metadata"].get("labels", {})) and any(p.get("name") in ports for p in s["spec"]["ports"]):
                for r in (inf, trn):
                    if matches(s["spec"].get("selector", {}), pod_labels[r.name]):
                        scraped[r.name] = scraped.get(r.name, 0) + 1
                p = [p for p in s["spec"]["ports"] if p.get("name") in ports][0]
                c.check(p["port"] == inf.metrics_port, f"{label}: scraped Service {s['metadata']['name']} uses the "
                        f"metrics port {inf.metrics_port}")
        c.check(scraped == {"inference": 1, "trainer": 1},
                f"{label}: ServiceMonitor {sm['metadata']['name']} scrapes replicas and trainer once each", str(scraped))

    # NetworkPolicy: covers both workloads, lets gRPC and metrics in.
    for np in by_kind(objs, "NetworkPolicy"):
        sel = np["spec"]["podSelector"].get("matchLabels", {})
        c.check(all(matches(sel, pod_labels[r]) for r in pod_labels), f"{label}: NetworkPolicy covers both workloads")
        rules = np["spec"].get("ingress", [])
        allowed = {p.get("port") for rule in rules for p in rule.get("ports", [])}
        c.check({inf.grpc_port, inf.metrics_port} <= allowed, f"{label}: NetworkPolicy admits gRPC and metrics ports",
                str(allowed))
        # HTTP: the same peers as gRPC (the same clients, the same tokens): every rule admitting one admits both.
        with_port = lambda port: [i for i, r in enumerate(rules) if any(p.get("port") == port for p in r.get("ports", []))]
        c.check(inf.http_port is not None and with_port(inf.http_port) == with_port(inf.grpc_port) != [],
                f"{label}: NetworkPolicy admits the HTTP port {inf.http_port} from the same peers as gRPC",
                f"rules with {inf.http_port}: {with_port(inf.http_port)}, with {inf.grpc_port}: {with_port(inf.grpc_port)}")

    # Tokens: placeholders in the base (frostd refuses them), real ones in an operator's overlay.
    sec = None
    for v in inf.workload["spec"]["template"]["spec"]["volumes"]:
        if "secret" in v:
            sec = idx.get(("Secret", v["secret"]["secretName"]))
    if sec is not None:
        first_lines = {k: base64.b64decode(val).decode().split("\n", 1)[0].strip() for k, val in sec.get("data", {}).items()}
        if placeholder_tokens:
            c.check(all(v == "" for v in first_lines.values()), f"{label}: the base's token placeholders have an empty "
                    "first line (frostd refuses them)")
        else:
            c.check(all(v for v in first_lines.values()), f"{label}: the overlay's tokens are real (non-empty)")
    return {"inference": inf, "trainer": trn, "hpa_metrics": pod_metrics}


def check_configs(c, roles, default_keys):
    print("[config] role configs against configs/default.yaml")
    allowed = set(default_keys) | PENDING_KEYS
    pending = sorted(PENDING_KEYS - set(default_keys))
    if pending:
        print(f"  note  {', '.join(pending)} not in configs/default.yaml yet: allowed (the follower mode adds them)")
    for role in roles:
        if role.config is None:
            continue
        c.check(all(isinstance(v, dict) for v in role.config.values()), f"{role.name}: every top-level key is a section")
        unknown = sorted(set(flatten(role.config)) - allowed)
        c.check(not unknown, f"{role.name} config: every key exists in configs/default.yaml", f"unknown: {unknown}")


def check_hpa_metric(c, metric_names):
    print("[autoscaling] HPA metric, prometheus-adapter rule, frostd's metrics")
    with open(ADAPTER_VALUES) as f:
        values = yaml.safe_load(f)
    rules = values.get("rules", {}).get("custom", [])
    sources = "".join(open(p).read() for p in METRIC_SOURCES)
    for name in metric_names:
        rule = [r for r in rules if r.get("name", {}).get("as") == name]
        c.check(len(rule) == 1, f"adapter values.yaml has one rule exposing {name}")
        if not rule:
            continue
        m = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", rule[0]["seriesQuery"])
        series = m.group(1) if m else None
        c.check(series is not None and f'"{series}"' in sources,
                f"the adapter's series {series} is a metric frostd exports (server/metrics*.cc)")
        c.check(re.fullmatch(rule[0]["name"]["matches"], series or "") is not None,
                f"the adapter rule's name.matches matches {series}")
        ov = rule[0].get("resources", {}).get("overrides", {})
        c.check(ov.get("pod", {}).get("resource") == "pod" and ov.get("namespace", {}).get("resource") == "namespace",
                "the adapter rule maps the pod and namespace labels")
        c.check("<<.LabelMatchers>>" in rule[0].get("metricsQuery", "") and "<<.GroupBy>>" in rule[0]["metricsQuery"],
                "the adapter metricsQuery keeps the HPA's label matchers and grouping")
    return [r["seriesQuery"].split("{")[0].strip() for r in rules]


def check_strictness(c, modules, good_text):
    """The validator must reject broken copies of a valid render: proof that validation is strict."""
    print("[schema] strictness: broken objects must fail")
    objs = parse_render(good_text)
    dep = [o for o in objs if o["kind"] == "Deployment"][0]
    sm = [o for o in objs if o["kind"] == "ServiceMonitor"][0]

    def broken(obj, mutate):
        o = copy.deepcopy(obj)
        mutate(o)
        return yaml.safe_dump(o)

    def ctr(o):
        return o["spec"]["template"]["spec"]["containers"][0]

    cases = [
        ("unknown field (typo) in a container", broken(dep, lambda o: ctr(o).__setitem__("readinessProbes", ctr(o).pop("readinessProbe"))),
         'unknown field "readinessProbes"'),
        ("unknown field deep in a probe", broken(dep, lambda o: ctr(o)["livenessProbe"]["grpc"].__setitem__("servcie", "")),
         'unknown field "servcie"'),
        ("unknown field at the top of a spec", broken(dep, lambda o: o["spec"].__setitem__("replicsa", 2)),
         'unknown field "replicsa"'),
        ("wrong type (string for an integer)", broken(dep, lambda o: o["spec"]["template"]["spec"].__setitem__(
            "terminationGracePeriodSeconds", "45")), "must be integer"),
        ("bad enum value", broken(dep, lambda o: ctr(o).__setitem__("imagePullPolicy", "Sometimes")), "imagePullPolicy"),
        ("missing required field", broken(dep, lambda o: ctr(o).pop("name")), "name"),
        ("unknown field in a ServiceMonitor (CRD)", broken(sm, lambda o: o["spec"]["endpoints"][0].__setitem__("intervall", "1s")),
         'unknown field "intervall"'),
        ("removed API version", broken(dep, lambda o: o.__setitem__("apiVersion", "extensions/v1beta1")),
         "not a stable API"),
        ("duplicate key", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: '1'}\ndata: {b: '2'}\n",
         "unique"),
    ]
    # One validator run for the object cases (each broken copy gets its own name), one for the YAML case.
    docs, names = [], []
    for i, (what, text, expect) in enumerate(cases):
        if text.startswith("apiVersion: v1\nkind: ConfigMap"):
            continue
        o = yaml.safe_load(text)
        o["metadata"]["name"] = f"broken-{i}"
        docs.append(o)
        names.append(i)
    control = copy.deepcopy(dep)
    control["metadata"]["name"] = "unbroken-control"
    docs.append(control)
    rc, out = validate(modules, yaml.safe_dump_all(docs), quiet=False)
    blocks = validator_blocks(out)
    c.check(rc == 1, "validator exits 1 on broken objects", f"rc {rc}")
    for i in names:
        what, _, expect = cases[i]
        b = blocks.get(f"broken-{i}", ["missing"])
        c.check(b[0] == "FAIL" and any(expect in e for e in b[1:]), f"validator rejects: {what}",
                f"expected an error containing {expect!r}, got: {b}\n{out}")
    c.check(blocks.get("unbroken-control", ["missing"]) == ["ok"], "validator accepts the unbroken Deployment (control)",
            out)
    what, text, expect = cases[-1]
    rc, out = validate(modules, text)
    c.check(rc == 1 and expect in out, f"validator rejects: {what}", f"rc {rc}, output:\n{out}")
