#!/usr/bin/python3
"""The layers of core/ point one way (docs/architecture.md).

core/CMakeLists.txt is the one place that says which layer may use which: every
`frost_core_layer(frost_<layer> SOURCES ... DEPS ...)` names the layers it links. This test reads that graph
and fails when
  - the graph has a cycle;
  - the graph inverts an order the layer map fixes (ORDER below: e.g. jobs sits above serving, so that jobs
    call the registry and serving never sees a job);
  - a file under core/<layer>/ includes core/<other>/ that <layer> does not (transitively) link — an upward
    or sideways include, which static linking alone would not always catch (header-only uses link fine);
  - anything under core/ or kernels/ includes server/, client/ or the generated protos (core builds without
    gRPC), or kernels/ includes core/.
Every violation is listed as file:line.

Usage: layers_test.py [SOURCE_DIR]
"""

import os
import re
import sys


def parse_layers(cmake_text):
    layers = {}
    for m in re.finditer(r"frost_core_layer\(\s*frost_(\w+)(.*?)\)", cmake_text, re.S):
        name, body = m.group(1), m.group(2)
        deps = []
        if "DEPS" in body:
            deps = [d[len("frost_"):] for d in body.split("DEPS", 1)[1].split() if d.startswith("frost_")]
        layers[name] = deps
    return layers


def closure(layers, name, seen=None, stack=()):
    if name in stack:
        raise ValueError("cycle: " + " -> ".join(stack + (name,)))
    seen = set() if seen is None else seen
    for d in layers.get(name, []):
        if d not in seen:
            seen.add(d)
            closure(layers, d, seen, stack + (name,))
    return seen


# Libraries under core/ that are no frost_core_layer: name -> the layers they may include. core/flags
# (frost_flags, added by core/CMakeLists.txt) is the programs' flag parser: Abseil only, linked by no layer
# (only programs parse command lines), so no layer may include it. It may include core/common, for the
# header-only typed fields (core/flags/table_flags.h makes flags from core/common/config_fields.h's tables);
# frost_flags itself links nothing of it.
STANDALONE = {"flags": ["common"]}

# (upper, lower): upper must link lower, and lower must not reach upper (docs/conventions.md, "Layers").
ORDER = [("jobs", "serving"), ("serving", "prototype"), ("serving", "generate"), ("jobs", "train"), ("generate", "exec"),
         ("exec", "model"), ("model", "kv"), ("kv", "store"), ("store", "common")]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(root):
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith((".h", ".cc", ".cu", ".cuh")):
                yield os.path.join(dirpath, f)


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    with open(os.path.join(src, "core", "CMakeLists.txt")) as f:
        layers = parse_layers(f.read())
    layers.update(STANDALONE)
    if len(layers) - len(STANDALONE) < 5:
        print(f"layers_test: FAIL: found only {sorted(layers)} in core/CMakeLists.txt")
        return 1
    errors = []
    allowed = {}
    for name in layers:
        try:
            allowed[name] = closure(layers, name) | {name}
        except ValueError as e:
            errors.append(f"core/CMakeLists.txt: {e}")
    for upper, lower in ORDER:
        if upper in allowed and lower in allowed:
            if lower not in allowed[upper]:
                errors.append(f"core/CMakeLists.txt: frost_{upper} must link frost_{lower} (the layer map puts it above)")
            if upper in allowed[lower]:
                errors.append(f"core/CMakeLists.txt: frost_{lower} links frost_{upper}, which the layer map puts above it")
    core_dirs = {d for d in os.listdir(os.path.join(src, "core")) if os.path.isdir(os.path.join(src, "core", d))}
    for d in sorted(core_dirs - set(layers)):
        errors.append(f"core/{d}/: a folder that is no frost_core_layer in core/CMakeLists.txt")
    n_files = 0
    for top in ("core", "kernels"):
        for path in sources(os.path.join(src, top)):
            n_files += 1
            rel = os.path.relpath(path, src)
            parts = rel.split(os.sep)
            layer = parts[1] if top == "core" and len(parts) > 2 else None
            with open(path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    head = inc.split("/")[0]
                    if head in ("server", "client") or inc.startswith("frost/v1/"):
                        errors.append(f"{rel}:{no}: includes {inc}: core and kernels build without the server")
                    elif top == "kernels" and head == "core":
                        errors.append(f"{rel}:{no}: includes {inc}: kernels sit below core")
                    elif layer and head == "core":
                        other = inc.split("/")[1]
                        if layer in allowed and other not in allowed[layer]:
                            errors.append(f"{rel}:{no}: includes {inc}: frost_{layer} does not link frost_{other} "
                                          f"(it links {', '.join(sorted(allowed[layer] - {layer})) or 'nothing'})")
    order = sorted(layers, key=lambda n: len(allowed.get(n, ())))
    print(f"layers_test: {n_files} files; layers bottom-up: {' < '.join(order)}")
    for e in errors:
        print("layers_test: FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
