#!/usr/bin/python3
"""Every frost program's --help comes from its flag table (core/flags/flags.h), and says what it accepts.

For each built program given as NAME=PATH (and each frostctl command, each frost-bench mode):
  - `--help` exits 0 and prints "usage: ..." on stdout; every flag listed under a flags heading has a
    description, and no flag is listed twice in one help;
  - every flag a table in the program's sources defines (`*_flag("--name", ...)`) appears in one of the
    program's helps: the check is made against the source, not against the table that prints the help;
  - an unknown flag exits with the program's usage-error code (frostctl 1, the others 2) and a message naming
    it, followed by the help, on stderr;
  - `-h` prints the same help as `--help` (checked at the top level).
Every failure is listed; exit 1 if any.

Usage: help_test.py SOURCE_DIR NAME=PATH...
"""

import glob
import os
import re
import subprocess
import sys

# The commands each program has, as argument prefixes before --help ([] = the program itself).
COMMANDS = {
    "frostctl": [[], ["generate"], ["tokenize"], ["info"], ["health"], ["predict"], ["train"],
                 ["train", "submit", "prototype"], ["train", "submit", "kv-repair"], ["train", "submit", "kvsplice"],
                 ["jobs"], ["jobs", "list"], ["jobs", "get"], ["jobs", "cancel"], ["jobs", "watch"],
                 ["artifacts"], ["artifacts", "list"], ["artifacts", "activate"], ["artifacts", "delete"],
                 ["server-info"]],
    "frost-bench": [[]] + [[m] for m in ("decode", "prefill", "bare-step", "engine", "parallel", "huge-pages",
                                         "prototype", "kv-repair", "kvsplice", "weights", "spec")],
}

# Where each program's flag tables are (relative to SOURCE_DIR).
SOURCES = {
    "frostd": ["server/main.cc"],
    "frostctl": ["client/frostctl/*.cc"],
    "frost-generate": ["tools/frost_generate.cc"],
    "frost-bench": ["bench/frost_bench.cc", "bench/bench_*.cc"],
    "frost-loadgen": ["bench/frost_loadgen.cc", "bench/loadgen_*.cc"],
    "frost-cuda-bench": ["bench/cuda/cuda_bench.cc"],
    "frost_fuzz_make_seeds": ["tests/fuzz/make_seeds.cc"],
}

USAGE_EXIT = {"frostctl": 1}  # the others: 2

# A flag defined in a table: string_flag("--x", ...), int32_flag("--x", 1, ...), value_flag("--x", ...).
DEFINED = re.compile(r'\b\w+_flag\(\s*"(--[a-z0-9][a-z0-9-]*)"')
# A line of a flags section: "  --name VALUE   help" or "  --name" alone (its help on the next line).
FLAG_LINE = re.compile(r"^  (-[-\w]+(?:, -[-\w]+)?)(?: (\S+))?(?:\s{2,}(\S.*))?$")


def run(path, args):
    return subprocess.run([path] + args, capture_output=True, text=True, timeout=120)


def flags_in_help(text, where, errors):
    """The flags listed under the help's flag headings; an error for one without a description."""
    found = []
    section = None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line and not line.startswith(" ") and line.endswith(":"):
            section = line[:-1]
            continue
        if section is None or "flags" not in section:
            continue
        m = FLAG_LINE.match(line)
        if not m:
            continue
        names = [n.strip() for n in m.group(1).split(",")]
        desc = m.group(3)
        if desc is None:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            desc = nxt.strip() if nxt.startswith(" " * 20) else ""
        if not desc:
            errors.append(f"{where}: {names[-1]} has no description")
        for n in names:
            if n in found:
                errors.append(f"{where}: {n} is listed twice")
            found.append(n)
    return found


def main():
    src = sys.argv[1]
    programs = dict(a.split("=", 1) for a in sys.argv[2:])
    errors = []
    n_helps = 0
    for name, path in sorted(programs.items()):
        if not os.path.exists(path):
            errors.append(f"{name}: {path} does not exist")
            continue
        listed = set()
        for prefix in COMMANDS.get(name, [[]]):
            where = " ".join([name] + prefix)
            r = run(path, prefix + ["--help"])
            n_helps += 1
            if r.returncode != 0:
                errors.append(f"{where} --help: exit {r.returncode}, stderr: {r.stderr[:300]}")
                continue
            if not r.stdout.startswith("usage: " + where.split(" ")[0]):
                errors.append(f"{where} --help: does not start with \"usage: {name}\": {r.stdout[:100]!r}")
            found = flags_in_help(r.stdout, where + " --help", errors)
            if "--help" not in found:
                errors.append(f"{where} --help: -h, --help is not listed")
            listed.update(found)
            if not prefix:  # one program start less per command: the test runs ~100 of them
                h = run(path, ["-h"])
                if h.returncode != 0 or h.stdout != r.stdout:
                    errors.append(f"{where} -h: exit {h.returncode}, or not the --help text")
            u = run(path, prefix + ["--no-such-flag"])
            want = USAGE_EXIT.get(name, 2)
            if u.returncode != want:
                errors.append(f"{where} --no-such-flag: exit {u.returncode}, expected {want}")
            if "--no-such-flag" not in u.stderr or "usage: " not in u.stderr:
                errors.append(f"{where} --no-such-flag: stderr does not name the flag and show the usage: "
                              f"{u.stderr[:200]!r}")
        defined = set()
        for pattern in SOURCES.get(name, []):
            for f in sorted(glob.glob(os.path.join(src, pattern))):
                with open(f, encoding="utf-8") as fh:
                    defined.update(DEFINED.findall(fh.read()))
        if not defined:
            errors.append(f"{name}: no flag table found in {SOURCES.get(name)}")
        for flag in sorted(defined - listed):
            errors.append(f"{name}: {flag} is defined in its sources but in none of its helps")
    print(f"help_test: {len(programs)} programs, {n_helps} helps")
    for e in errors:
        print("help_test: FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
