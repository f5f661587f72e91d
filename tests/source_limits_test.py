#!/usr/bin/python3
"""No source file over 800 lines (docs/conventions.md, "Files"; issue 41): a file that long holds more than one
purpose and is split along its seams instead. And sources cite pages inside the repository (issue 54): no
reference to a design, conventions or seed file outside it, and every `docs/<page>.md` a source names exists.

Checks every tracked source file (*.cc *.h *.cu *.cuh *.py *.mjs *.js *.sh) under core kernels server client
bench tools tests scripts deploy, and fails naming each one over the limit with its line count. The files
are those `git ls-files` lists; where git cannot answer (a source tree without its .git, or a worktree whose
.git is not reachable from here) the directories are walked instead, skipping build outputs and installed
packages.

Usage: source_limits_test.py [SOURCE_DIR]
"""

import os
import re
import subprocess
import sys

LIMIT = 800
DIRS = ("core", "kernels", "server", "client", "bench", "tools", "tests", "scripts", "deploy")
EXTS = (".cc", ".h", ".cu", ".cuh", ".py", ".mjs", ".js", ".sh")
# Walking (no git): directories that hold generated or installed files, not sources.
SKIP_DIRS = {".git", "node_modules", "__pycache__", ".cache", ".pytest_cache"}
# Over the limit for now, each with the reason it may be. Keep this empty: a file is split, not listed.
ALLOWED: set = set()
# Citations of files outside the repository (the workspace's design notes and algorithm seeds): a reader of the
# repository cannot open them. Cite docs/ instead.
OUTSIDE = re.compile(r"\.\./shared/seeds|\bDESIGN\.md|\bCONVENTIONS(\.md)?\b")
DOC_PAGE = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", *DIRS], capture_output=True, check=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    files = [f for f in out.decode("utf-8", "replace").split("\0") if f]
    return files or None


def walked_files(root):
    files = []
    for top in DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build"))
            for name in filenames:
                files.append(os.path.relpath(os.path.join(dirpath, name), root))
    return files


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    files = tracked_files(root)
    how = "git ls-files"
    if files is None:
        files, how = walked_files(root), "walked"
    files = sorted(f for f in files if f.endswith(EXTS) and os.path.isfile(os.path.join(root, f)))
    if not files:
        print(f"source_limits: FAIL: no source files found under {root}", file=sys.stderr)
        return 1
    cites = []
    for f in files:
        if f == "tests/source_limits_test.py":
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as src:
            for i, line in enumerate(src, 1):
                if OUTSIDE.search(line):
                    cites.append(f"  {f}:{i}: cites a file outside the repository: {line.strip()[:100]}")
                for page in DOC_PAGE.findall(line):
                    if not os.path.isfile(os.path.join(root, "docs", page)):
                        cites.append(f"  {f}:{i}: cites docs/{page}, which does not exist")
    if cites:
        print(f"source_limits: FAIL: {len(cites)} citation(s) a reader of the repository cannot follow:",
              file=sys.stderr)
        print("\n".join(cites), file=sys.stderr)
        return 1
    over = [(f, n) for f in files if (n := count_lines(os.path.join(root, f))) > LIMIT]
    bad = [(f, n) for f, n in over if f not in ALLOWED]
    for f in sorted(ALLOWED):
        if not os.path.isfile(os.path.join(root, f)) or count_lines(os.path.join(root, f)) <= LIMIT:
            print(f"source_limits: note: {f} is allowed over {LIMIT} lines but no longer is; drop it from ALLOWED")
    if bad:
        print(f"source_limits: FAIL: {len(bad)} source file(s) over {LIMIT} lines (split each along its seams):",
              file=sys.stderr)
        for f, n in bad:
            print(f"  {f}: {n} lines", file=sys.stderr)
        return 1
    print(f"source_limits: {len(files)} files ({how}), none over {LIMIT} lines"
          + (f" (allowed for now: {', '.join(f for f, _ in over)})" if over else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
