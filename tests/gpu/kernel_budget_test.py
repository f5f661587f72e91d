#!/usr/bin/python3
"""Register and spill guard for the CUDA kernels (kernels/cuda/*.cu), from ptxas's own report.

Compiles each .cu for sm_90 (H100 / H200, the cards frost is measured on) with `-Xptxas -v`, reads every kernel's
registers, stack frame and spill bytes, and checks them against tests/gpu/kernel_budget.json:
  - a kernel may not use more registers, or spill more bytes, than its budget (a change that does must say so
    by raising the budget in the same commit — the figure is then visible in review);
  - a kernel with no budget fails the test until one is written down;
  - budgets of kernels that no longer exist are reported (stale), not failed.
The whole table is written to --out (JSON) for the record. Needs only nvcc (no GPU). `--update` rewrites the
budget file from this compile (use it when a change is meant).

Usage: kernel_budget_test.py --nvcc PATH --src DIR [--out FILE] [--update]
"""
import argparse, json, os, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

SOURCES = ["kernels/cuda/ops.cu", "kernels/cuda/gemv.cu", "kernels/cuda/sample.cu"]
ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    short = []
    for d in out.splitlines():
        d = d.replace("(anonymous namespace)::", "").replace("frost::cuda::", "")
        d = re.sub(r"^void ", "", d)
        depth, cut = 0, len(d)
        for i, ch in enumerate(d):  # drop the parameter list: the first '(' outside template brackets
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0:
                cut = i
                break
        short.append(d[:cut])
    return short


def compile_report(nvcc, src_dir, cu):
    cmd = [nvcc, "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-I" + src_dir,
           "-Xptxas", "-v", os.path.join(src_dir, cu), "-o", os.devnull]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"kernel_budget: nvcc failed on {cu}:\n{p.stderr[-4000:]}")
    rows, cur = [], None
    for line in p.stderr.splitlines():
        m = ENTRY.search(line)
        if m:
            cur = {"mangled": m.group(1), "file": cu}
            continue
        m = SPILL.search(line)
        if m and cur is not None:
            cur.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            continue
        m = USED.search(line)
        if m and cur is not None:
            cur["registers"] = int(m.group(1))
            rows.append(cur)
            cur = None
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--out")
    ap.add_argument("--update", action="store_true")
    a = ap.parse_args()
    src = os.path.abspath(a.src)
    with ThreadPoolExecutor(len(SOURCES)) as ex:
        rows = [r for part in ex.map(lambda cu: compile_report(a.nvcc, src, cu), SOURCES) for r in part]
    for r, name in zip(rows, demangle([r["mangled"] for r in rows])):
        r["kernel"] = name
    table = {r["kernel"]: {k: r[k] for k in ("file", "registers", "stack", "spill_stores", "spill_loads")}
             for r in rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"arch": "sm_90", "kernels": table}, f, indent=1, sort_keys=True)
    budget_path = os.path.join(src, "tests", "gpu", "kernel_budget.json")
    if a.update:
        with open(budget_path, "w") as f:
            json.dump({k: {"registers": v["registers"], "spill_stores": v["spill_stores"]} for k, v in table.items()},
                      f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"kernel_budget: wrote {len(table)} budgets to {budget_path}")
        return 0
    with open(budget_path) as f:
        budget = json.load(f)
    bad = []
    for k, v in sorted(table.items()):
        b = budget.get(k)
        if b is None:
            bad.append(f"{k}: no budget (registers {v['registers']}, spill stores {v['spill_stores']}); add it "
                       f"to tests/gpu/kernel_budget.json (or run with --update)")
            continue
        if v["registers"] > b["registers"]:
            bad.append(f"{k}: {v['registers']} registers, budget {b['registers']}")
        if v["spill_stores"] > b["spill_stores"]:
            bad.append(f"{k}: {v['spill_stores']} bytes of spill stores, budget {b['spill_stores']}")
    stale = sorted(set(budget) - set(table))
    spilling = sorted(k for k, v in table.items() if v["spill_stores"] > 0)
    print(f"kernel_budget: {len(table)} kernels on sm_90, max {max(v['registers'] for v in table.values())} "
          f"registers; spilling: {', '.join(spilling) if spilling else 'none'}")
    for s in stale:
        print(f"kernel_budget: stale budget (no such kernel now): {s}")
    for b in bad:
        print(f"kernel_budget: FAIL {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
