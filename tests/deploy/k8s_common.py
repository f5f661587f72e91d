"""Shared by the Kubernetes manifest test (tests/deploy/k8s_test.py runs it): its paths and constants, the
pass/fail tally, and helpers over rendered objects (selectors, containers, config merging, quantities).
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
import urllib.error
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
# Helpers over rendered objects.

def validator_blocks(out):
    """validate.mjs's report by object name: ["ok" | "FAIL", its indented detail lines...]."""
    blocks, current = {}, None
    for line in out.splitlines():
        m = re.match(r"^(FAIL|ok) +\S+ \S+ (?:\S+/)?(\S+)$", line)
        if m:
            current = m.group(2)
            blocks[current] = [m.group(1)]
        elif current and line.startswith("       "):
            blocks[current].append(line.strip())
    return blocks


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
        # The OpenAI HTTP API: server.http.listen, "" (off) in configs/default.yaml -> None.
        self.http_listen = str(self.effective["server"].get("http", {}).get("listen", "") or "")
        self.http_port = port_of(self.http_listen) if self.http_listen else None

    def model_path(self):
        return arg_value(self.args, "--model") or self.effective["model"]["path"]
