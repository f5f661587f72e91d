"""The k8s test's tools and rendering: the pinned kustomize v5 renderer (scripts/install_k8s_tools.sh),
rendering an overlay, validate.mjs, and the operator overlay deploy/k8s/README.md describes.
"""

from k8s_common import *  # noqa: F401,F403


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
