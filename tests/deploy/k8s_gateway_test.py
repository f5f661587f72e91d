#!/usr/bin/env python3
"""Checks deploy/k8s/overlays/gateway offline: frost behind the Gateway API Inference Extension (InferencePool,
llm-d-router's endpoint picker, Gateway and HTTPRoute).

  tests/deploy/k8s_gateway_test.py [--part manifests|frostd|all]

manifests: renders overlays/gateway (and overlays/cpu, the base it adds to) with the pinned kustomize
           (scripts/install_k8s_tools.sh); validates every object strictly, the custom resources against the
           upstream CRD schemas kept in tests/deploy/data/crds (and broken copies that must fail); the base's
           invariants on the base's objects of the render; then the gateway's (k8s_gateway_checks.py): the pool
           selects the replicas' HTTP port and names the picker's ext-proc Service, the picker's image, RBAC,
           flags and EndpointPickerConfig (frost's metric names, scrape port, scorers, KV-events ports and
           topic, render URL), the route, the NetworkPolicy openings at both ends, the HPA's metric = the queue
           the picker reads, and the replicas' config = the base's + server.kv_events.
frostd:    the same render, then $FROST_FROSTD on the rendered replica config (k8s_gateway_live.py): each metric
           and label the picker's engine config names exists on the live /metrics with its type and range (KV
           utilisation in [0, 1], counts, the info gauge's integers) idle and under six concurrent streams;
           /v1/models and the render endpoints answer in the shapes the picker's token-producer reads, the
           render endpoints without a token (auth.open_render) and nothing else; and a frostd without
           auth.open_render (the default) keeps them behind the token.
"""

import argparse
import shutil
import sys
import tempfile
import time
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from k8s_common import *  # noqa: F401,F403,E402
from k8s_gateway_checks import *  # noqa: F401,F403,E402
from k8s_invariants import check_render  # noqa: E402
from k8s_render import *  # noqa: F401,F403,E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("manifests", "frostd", "all"), default="all")
    opts = ap.parse_args()
    started = time.time()
    c = Checks()
    binary = None
    if opts.part in ("frostd", "all"):
        binary = os.environ.get("FROST_FROSTD")
        if not binary or not os.access(binary, os.X_OK):
            print(f"k8s_gateway_test: FROST_FROSTD must name the frostd binary (got {binary!r})", file=sys.stderr)
            return 1
    render_cmd, modules, notes = setup_tools()
    for n in notes:
        print(f"  note  {n}")
    if render_cmd is None:
        print("k8s_gateway_test: FAIL: no kustomize v5 renderer (see scripts/install_k8s_tools.sh)", file=sys.stderr)
        return 1
    with open(DEFAULT_CONFIG) as f:
        defaults = yaml.safe_load(f)
    try:
        text = render(render_cmd, GATEWAY_DIR)
        base_text = render(render_cmd, os.path.join(K8S_DIR, "overlays", "cpu"))
    except RuntimeError as e:
        c.fail("gateway: renders", str(e))
        return finish(c, started)
    objs, base_objs = parse_render(text), parse_render(base_text)
    c.check(True, f"gateway: renders ({len(objs)} objects)")
    if opts.part in ("manifests", "all"):
        if modules is None:
            c.fail("gateway: schema validation", "the validator's npm packages are not installed")
        else:
            check_schemas(c, modules, objs)
        # The base's invariants still hold for the base's objects (the overlay's own ones are checked below).
        base_keys = {(o["kind"], strip_hash(o["metadata"]["name"])) for o in base_objs}
        check_render(c, "gateway (base objects)", [o for o in objs if (o["kind"], strip_hash(o["metadata"]["name"]))
                                                   in base_keys], defaults, False, True)
    info = check_gateway(c, objs, base_objs, defaults, set(flatten(defaults)))
    if opts.part in ("frostd", "all") and info:
        from k8s_gateway_live import run_live
        tmp = tempfile.mkdtemp(prefix="k8s_gateway-")
        try:
            run_live(c, binary, info, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return finish(c, started)


def finish(c, started):
    took = time.time() - started
    print()
    if c.failed:
        print(f"k8s_gateway_test: {len(c.failed)} check(s) FAILED, {c.passed} passed ({took:.1f} s):")
        for f in c.failed:
            print(f"  - {f.splitlines()[0]}")
        return 1
    print(f"k8s_gateway_test: all {c.passed} checks passed ({took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
