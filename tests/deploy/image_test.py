#!/usr/bin/env python3
"""Checks the container image's definition (Dockerfile, deploy/image/) against the build tree and configs.

Libraries: every shared library the built frostd and frostctl load (ldd, on this Debian build machine), and
those of the libraries frostd dlopen()s (--dlopen: libfrost_spm.so, which the image must also ship), must
come from a package the image's runtime stage installs: a package of deploy/image/runtime-packages.txt, or
one apt brings with them. Each library's file is mapped to its package with dpkg-query -S; what apt brings is
the closure of the listed packages over the Depends and Pre-Depends fields of /var/lib/dpkg/status, taking for
each "a | b" the alternative apt would take (one already listed, else the first) so that an OR never counts
as coverage that a fresh `apt-get install` would not give. A library name in frostd's or frostctl's strings
that is neither linked (NEEDED) nor given with --dlopen fails too: it is loaded at run time, and ldd
cannot see what it needs.

Dockerfile: every stage FROM Debian bookworm; the build stage goes through scripts/install_deps.sh and builds
frostd + frostctl without -march=native; the final stage installs runtime-packages.txt (no build tools), runs
as a non-root USER, has a HEALTHCHECK through `frostctl health`, ENTRYPOINT frostd --config
/etc/frost/frost.yaml, EXPOSEs exactly the ports of configs/default.yaml plus the image config's HTTP port
(make-config.sh turns server.http.listen on), keeps the state directory in a VOLUME and finds the built-in
model at the config's model.path from its WORKDIR.

Self-check: the same checks run on broken copies (a package dropped from the list, USER root, a wrong port,
...) and must fail, so a check that can no longer fail is itself a failure.

  image_test.py --frostd build/server/frostd --frostctl build/client/frostctl \
                --dlopen build/core/libfrost_spm.so [--source-dir .] [-v]

Exit 0: all hold; 1: a check failed (each problem printed); 77: no dpkg/ldd here (ctest: skipped).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77


class Fail(Exception):
    pass


# ---------------------------------------------------------------------------------------------------------
# The runtime package list

def read_package_list(path):
    pkgs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            for word in line.split():
                if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", word):
                    raise Fail(f"{path}:{n}: '{word}' is not a Debian package name")
                pkgs.append(word)
    if not pkgs:
        raise Fail(f"{path}: lists no packages")
    return pkgs


# ---------------------------------------------------------------------------------------------------------
# dpkg: installed packages, their dependencies, and which package owns a file

def _dep_name(atom):
    """'libc6 (>= 2.34)' / 'python3:any' / 'libfoo:amd64 [...]' -> the package name."""
    atom = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", atom).strip()
    return atom.split(":", 1)[0].strip()


def _clauses(field):
    out = []
    for clause in field.split(","):
        alts = [_dep_name(a) for a in clause.split("|")]
        alts = [a for a in alts if a]
        if alts:
            out.append(alts)
    return out


class Dpkg:
    def __init__(self, status_path="/var/lib/dpkg/status"):
        self.installed = set()
        self.deps = {}  # package -> [[alternatives], ...]
        self.providers = {}  # virtual name -> {package}
        with open(status_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for para in text.split("\n\n"):
            fields, last = {}, None
            for line in para.splitlines():
                if line[:1] in (" ", "\t") and last:
                    fields[last] += " " + line.strip()
                elif ":" in line:
                    last, _, value = line.partition(":")
                    fields[last] = value.strip()
            name = fields.get("Package")
            if not name or not fields.get("Status", "").endswith(" installed"):
                continue
            self.installed.add(name)
            clauses = self.deps.setdefault(name, [])
            for key in ("Pre-Depends", "Depends"):
                if key in fields:
                    clauses.extend(_clauses(fields[key]))
            for prov in fields.get("Provides", "").split(","):
                prov = _dep_name(prov)
                if prov:
                    self.providers.setdefault(prov, set()).add(name)

    def satisfiers(self, name):
        """Installed packages that satisfy a dependency on `name` (itself, or what provides it)."""
        s = set(self.providers.get(name, ()))
        if name in self.installed:
            s.add(name)
        return s

    def closure(self, explicit):
        """What `apt-get install --no-install-recommends <explicit>` installs, as far as this machine's dpkg
        status can tell. For each clause "a | b | ...": satisfied if one alternative is already chosen (an
        explicit package comes first); else the FIRST alternative is taken - itself when installed here, else
        its sole installed provider. When that cannot be followed (not installed here, or several providers),
        nothing is added: later alternatives never count, because apt would not pick them on its own."""
        chosen = {p for p in explicit if p in self.installed}
        todo = sorted(chosen)
        unresolved = []
        while todo:
            pkg = todo.pop()
            for clause in self.deps.get(pkg, ()):
                if any(self.satisfiers(a) & chosen for a in clause):
                    continue
                first = clause[0]
                pick = {first} if first in self.installed else self.satisfiers(first)
                if len(pick) != 1:
                    unresolved.append((pkg, " | ".join(clause)))
                    continue
                (p,) = pick
                chosen.add(p)
                todo.append(p)
        return chosen, unresolved


def _usr_swap(path):
    for a, b in (("/usr/lib/", "/lib/"), ("/usr/lib64/", "/lib64/")):
        if path.startswith(a):
            return b + path[len(a):]
        if path.startswith(b):
            return a + path[len(b):]
    return None


def _candidates(path):
    """Paths under which dpkg may have registered the file ldd resolved: the file actually loaded first
    (through symlinks such as /etc/alternatives), then the name ldd printed; each also across the merged /usr."""
    out = []
    for p in (os.path.realpath(path), path):
        for q in (p, _usr_swap(p)):
            if q and q not in out:
                out.append(q)
    return out


def owners(paths):
    """{path: package} for the paths dpkg knows, with one dpkg-query call."""
    if not paths:
        return {}
    r = subprocess.run(["dpkg-query", "-S", *paths], capture_output=True, text=True)
    found = {}
    for line in r.stdout.splitlines():
        if line.startswith("diversion "):
            continue
        pkgs, sep, path = line.partition(": ")
        if not sep:
            continue
        found[path.strip()] = [p.strip().split(":", 1)[0] for p in pkgs.split(",")]
    return found


def ldd(binary):
    """[(soname, resolved path)] of every library the dynamic loader maps for `binary`, as the image would
    (no LD_LIBRARY_PATH / LD_PRELOAD from the environment)."""
    if not os.path.isfile(binary):
        raise Fail(f"{binary}: no such file (build frostd and frostctl first: cmake --build build --target "
                   "frostd frostctl)")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    r = subprocess.run(["ldd", binary], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise Fail(f"ldd {binary} failed (exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    libs, missing = [], []
    for line in r.stdout.splitlines():
        line = line.strip()
        m = re.match(r"(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
        if m:
            if m.group(2) == "not found":
                missing.append(m.group(1))
            elif m.group(2).startswith("/"):
                libs.append((m.group(1), m.group(2)))
            continue
        m = re.match(r"(/\S+) \(0x[0-9a-f]+\)$", line)  # the loader itself
        if m:
            libs.append((os.path.basename(m.group(1)), m.group(1)))
        # else: linux-vdso.so.1 (the kernel's, no file)
    if missing:
        raise Fail(f"{binary}: the loader cannot find {', '.join(missing)} on this machine")
    if not libs:
        raise Fail(f"{binary}: ldd lists no libraries (a static binary? this check expects a dynamic one)")
    return libs


def named_libraries(binary):
    """Shared-library names written in the binary (dynamic section strings and string literals alike)."""
    with open(binary, "rb") as f:
        data = f.read()
    return {m.group(1).decode() for m in re.finditer(rb"(?<![A-Za-z0-9_+-])(lib[A-Za-z0-9_+-]+\.so(?:\.[0-9]+)*)", data)}


def needed(binary):
    r = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True)
    if r.returncode != 0:
        raise Fail(f"readelf -d {binary} failed: {r.stderr.strip()}")
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout))


def check_runtime_loaded(binaries, dlopened):
    """Library names a binary mentions without linking them are dlopen()ed: each must be given with --dlopen."""
    problems = []
    given = {os.path.basename(d) for d in dlopened}
    for b in binaries:
        for name in sorted(named_libraries(b) - needed(b) - given):
            problems.append(f"{os.path.basename(b)} names {name} but does not link it: a library loaded at run "
                            "time (dlopen). Ship it in the image (COPY + ldconfig in the Dockerfile) and pass it "
                            "to this test with --dlopen (tests/deploy/image.cmake) so its libraries are checked")
    return problems


def library_packages(binaries):
    """{binary: [(soname, path, package or None)]}."""
    per_bin = {b: ldd(b) for b in binaries}
    cands = {}
    for libs in per_bin.values():
        for _, path in libs:
            cands.setdefault(path, _candidates(path))
    owned = owners(sorted({c for cs in cands.values() for c in cs}))
    out = {}
    for b, libs in per_bin.items():
        rows = []
        for soname, path in libs:
            pkg = None
            for c in cands[path]:
                if c in owned:
                    pkg = owned[c][0]
                    break
            rows.append((soname, path, pkg))
        out[b] = rows
    return out


def under(path, dirs):
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d.rstrip("/") + "/") for d in dirs)


def check_libraries(libs_by_bin, listed, dpkg, cuda_dirs=()):
    """Problems (strings) of the runtime list against the binaries' libraries. Libraries of the CUDA Toolkit
    (cuda_dirs: a FROST_CUDA build links libcudart and libcublas from it) are left out: the image is a CPU
    build (its builder has no nvcc, so `make configure` leaves FROST_CUDA off; check_dockerfile holds it
    there), and a CUDA image takes them from an NVIDIA CUDA base image, not from Debian."""
    problems = []
    for p in listed:
        if p not in dpkg.installed and not dpkg.satisfiers(p):
            problems.append(f"runtime-packages.txt lists '{p}', which is not installed on this build machine: "
                            "misspelt, or not a library the binaries use (its dependencies cannot be followed)")
    chosen, _ = dpkg.closure(listed)
    for b, rows in libs_by_bin.items():
        for soname, path, pkg in rows:
            if pkg is None and under(path, cuda_dirs):
                continue
            if pkg is None:
                problems.append(f"{os.path.basename(b)}: {soname} ({path}) belongs to no Debian package, so no "
                                "package list can ship it (built by hand? install it from a package)")
            elif pkg not in chosen:
                problems.append(f"{os.path.basename(b)}: {soname} ({path}) comes from package '{pkg}', which is "
                                "neither in deploy/image/runtime-packages.txt nor brought in by the packages "
                                f"there: add '{pkg}' to the list")
    return problems


# ---------------------------------------------------------------------------------------------------------
# Dockerfile

def parse_dockerfile(text):
    """[(stage name or None, [(INSTRUCTION, args)])], one entry per FROM."""
    logical, cur = [], ""
    for raw in text.splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):  # comment lines inside a continued instruction are dropped
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        logical.append(cur + s)
        cur = ""
    if cur.strip():
        logical.append(cur)
    stages = []
    for line in logical:
        word, _, args = line.partition(" ")
        ins = word.upper()
        args = args.strip()
        if ins == "FROM":
            toks = [t for t in args.split() if not t.startswith("--")]
            name = toks[2] if len(toks) >= 3 and toks[1].lower() == "as" else None
            stages.append((name, [(ins, args)]))
        elif ins == "ARG" and not stages:
            continue
        elif not stages:
            raise Fail(f"Dockerfile: {ins} before the first FROM")
        else:
            stages[-1][1].append((ins, args))
    return stages


def _exec_form(args):
    try:
        v = json.loads(args)
    except ValueError:
        return None
    return v if isinstance(v, list) and all(isinstance(x, str) for x in v) else None


def _copy_parts(args):
    """COPY/ADD args -> (flags, sources, dest)."""
    v = _exec_form(args)
    toks = v if v is not None else shlex.split(args)
    flags = [t for t in toks if t.startswith("--")]
    rest = [t for t in toks if not t.startswith("--")]
    return flags, rest[:-1], rest[-1] if rest else ""


def config_facts(config_text):
    """server.listen / metrics_listen ports, server.http.listen (its port, or None when "" = off), model.path
    and jobs.state_dir of a frostd YAML config (top-level sections with two-space fields and two-space
    subsections with four-space fields, as configs/default.yaml is written: server.listen and
    server.http.listen are both `listen:` lines, told apart by their indent)."""
    section, sub, facts = None, None, {}
    for line in config_text.splitlines():
        m = re.match(r"^([a-z_]+):\s*$", line)
        if m:
            section, sub = m.group(1), None
            continue
        m = re.match(r"^  ([a-z_]+):\s*$", line)
        if m and section:
            sub = m.group(1)
            continue
        m = re.match(r'^(  |    )([a-z_]+):\s*"?([^"#]*?)"?\s*(#.*)?$', line)
        if m and section and (len(m.group(1)) == 2 or sub):
            key = f"{section}.{m.group(2)}" if len(m.group(1)) == 2 else f"{section}.{sub}.{m.group(2)}"
            facts[key] = m.group(3).strip()
    for key in ("server.listen", "server.metrics_listen", "server.http.listen", "model.path", "jobs.state_dir"):
        if key not in facts:
            raise Fail(f"config: no {key}")
    for key in ("server.listen", "server.metrics_listen", "server.http.listen"):
        if key == "server.http.listen" and facts[key] == "":
            facts[key + ".port"] = None  # the HTTP API off
            continue
        port = facts[key].rsplit(":", 1)[-1]
        if not port.isdigit():
            raise Fail(f"config: {key} '{facts[key]}' has no port")
        facts[key + ".port"] = int(port)
    return facts


def check_dockerfile(text, image_cfg, default_cfg, src, dlopened=()):
    """Problems (strings) of the Dockerfile text. image_cfg: the config make-config.sh writes for the image;
    default_cfg: configs/default.yaml's; dlopened: libraries frostd loads at run time (the image ships them)."""
    problems = []
    try:
        stages = parse_dockerfile(text)
    except Fail as e:
        return [str(e)]
    if len(stages) < 2:
        problems.append(f"Dockerfile: {len(stages)} stage(s); expected a build stage and a runtime stage")
    if not stages:
        return problems
    for i, (name, ins) in enumerate(stages):
        toks = [t for t in ins[0][1].split() if not t.startswith("--")]
        image = toks[0] if toks else ""
        if not re.fullmatch(r"(docker\.io/library/)?debian:bookworm(-slim)?(@sha256:[0-9a-f]{64})?", image):
            problems.append(f"Dockerfile: stage {i + 1} ({name or 'unnamed'}) is FROM '{image}', not Debian bookworm")
    if re.search(r"-march=native|FROST_MARCH\s*=\s*['\"]?native", text):
        problems.append("Dockerfile: builds with -march=native; the image must keep FROST_MARCH's portable default")
    if re.search(r"FROST_CUDA\s*=\s*['\"]?(ON|1|TRUE|YES)", text, re.I) or re.search(r"nvidia/cuda|nvcc", text):
        problems.append("Dockerfile: builds with CUDA; the image is the CPU build (its runtime stage ships Debian "
                        "packages only, and CUDA's libraries are no Debian package): a CUDA image is its own "
                        "Dockerfile on an NVIDIA CUDA base")

    build_runs = " ".join(a for _, ins in stages[:-1] for i, a in ins if i == "RUN")
    if not re.search(r"scripts/install_deps\.sh|make\s+(\S+\s+)*(deps|configure|build)\b", build_runs):
        problems.append("Dockerfile: the build stage does not install packages with scripts/install_deps.sh "
                        "(directly or by make deps/configure/build), so it can drift from `make build`")
    if not (re.search(r"make\s+(\S+\s+)*build\b", build_runs)
            or re.search(r"--target\s+([^&;|]*\s)?frostd\b", build_runs) and re.search(r"--target\s+([^&;|]*\s)?frostctl\b", build_runs)):
        problems.append("Dockerfile: no build stage RUN builds frostd and frostctl (make build, or cmake --build "
                        "--target frostd frostctl)")

    # the build stage's sources: every directory CMakeLists.txt adds (tests/, bench/ only when configured on)
    build_copies = [_copy_parts(a) for _, ins in stages[:-1] for i, a in ins if i == "COPY"]
    copied = {s.rstrip("/") for flags, srcs, _ in build_copies if not flags for s in srcs}
    build_text = " ".join(a for _, ins in stages[:-1] for _, a in ins)
    if "." not in copied:
        try:
            with open(os.path.join(src, "CMakeLists.txt")) as f:
                subdirs = re.findall(r"^\s*add_subdirectory\(\s*([^\s)]+)", f.read(), re.M)
        except OSError:
            subdirs = []
        off = {"tests": "-DFROST_BUILD_TESTS=OFF", "bench": "-DFROST_BUILD_BENCH=OFF"}
        for d in subdirs:
            top = d.split("/", 1)[0]
            if top in copied or (top in off and off[top] in build_text):
                continue
            problems.append(f"Dockerfile: CMakeLists.txt adds {d}/, which the build stage does not COPY")
        for f in ("CMakeLists.txt", "Makefile", "cmake", "scripts/install_deps.sh"):
            if f not in copied:
                problems.append(f"Dockerfile: the build stage does not COPY {f}")

    final = stages[-1][1]
    get = lambda kind: [a for i, a in final if i == kind]
    runs = " ".join(get("RUN"))
    copies = [_copy_parts(a) for a in get("COPY") + get("ADD")]

    # runtime packages: from the list file, and nothing to build with
    if not any("deploy/image/runtime-packages.txt" in s for _, srcs, _ in copies for s in srcs):
        problems.append("Dockerfile: the final stage does not COPY deploy/image/runtime-packages.txt")
    elif not re.search(r"runtime-packages\.txt", runs) or "apt-get install" not in runs:
        problems.append("Dockerfile: the final stage does not apt-get install the packages of runtime-packages.txt")
    if re.search(r"install_deps|build-essential|\S+-dev\b", runs):
        problems.append("Dockerfile: the final stage installs build tools or -dev packages")

    users = get("USER")
    if not users:
        problems.append("Dockerfile: the final stage has no USER: frostd would run as root")
    else:
        user = users[-1].split(":", 1)[0].strip()
        if user in ("root", "0", ""):
            problems.append(f"Dockerfile: the final stage's USER is '{users[-1]}' (root); run as a non-root user")

    hcs = get("HEALTHCHECK")
    if not hcs or hcs[-1].strip().upper() == "NONE":
        problems.append("Dockerfile: the final stage has no HEALTHCHECK")
    else:
        hc = hcs[-1]
        cmd = hc[hc.find("CMD") + 3:].strip() if "CMD" in hc else ""
        argv = _exec_form(cmd) or shlex.split(cmd)
        if not argv or os.path.basename(argv[0]) != "frostctl" or "health" not in argv[1:]:
            problems.append(f"Dockerfile: HEALTHCHECK does not run `frostctl health` ({hc})")
        else:
            port = str(default_cfg["server.listen.port"])
            addr = argv[argv.index("--addr") + 1] if "--addr" in argv[:-1] else "localhost:50051"
            if addr.rsplit(":", 1)[-1] != port:
                problems.append(f"Dockerfile: HEALTHCHECK asks {addr}, frostd listens on port {port}")

    eps = get("ENTRYPOINT")
    ep = _exec_form(eps[-1]) if eps else None
    if not ep:
        problems.append("Dockerfile: the final stage has no exec-form ENTRYPOINT [\"...\"]")
    else:
        runs_frostd = os.path.basename(ep[0]) == "frostd"
        if not runs_frostd:  # a wrapper copied from the repository that execs frostd
            for _, srcs, dest in copies:
                if dest == ep[0] and len(srcs) == 1 and os.path.isfile(os.path.join(src, srcs[0])):
                    with open(os.path.join(src, srcs[0])) as f:
                        runs_frostd = bool(re.search(r'^\s*exec\s+\S*frostd\s+"\$@"', f.read(), re.M))
        if not runs_frostd:
            problems.append(f"Dockerfile: ENTRYPOINT {ep} does not run frostd (directly, or a wrapper from the "
                            "repository whose last step is exec .../frostd \"$@\")")
        pairs = list(zip(ep, ep[1:]))
        if ("--config", "/etc/frost/frost.yaml") not in pairs:
            problems.append(f"Dockerfile: ENTRYPOINT {ep} does not pass --config /etc/frost/frost.yaml")
    cmds = get("CMD")
    if cmds and _exec_form(cmds[-1]) is None:
        problems.append(f"Dockerfile: CMD {cmds[-1]} is not exec form (it would run under /bin/sh -c)")
    if not any(d == "/etc/frost/frost.yaml" for _, _, d in copies) and \
            not re.search(r"make-config\.sh\s+\S*default\.yaml\s+/etc/frost/frost\.yaml", runs):
        problems.append("Dockerfile: the final stage neither copies nor writes (make-config.sh) /etc/frost/frost.yaml")

    # libraries loaded at run time: in the final stage, then ldconfig (frostd dlopen()s them by name)
    for lib in dlopened:
        base = os.path.basename(lib)
        idx = [n for n, (i, a) in enumerate(final) if i in ("COPY", "ADD")
               and any(os.path.basename(s) == base for s in _copy_parts(a)[1])]
        if not idx:
            problems.append(f"Dockerfile: the final stage does not COPY {base}, which frostd dlopen()s")
        elif not any(i == "RUN" and re.search(r"\bldconfig\b", a) for i, a in final[idx[0] + 1:]):
            problems.append(f"Dockerfile: no RUN ldconfig after copying {base}: dlopen() by name would not find it")

    exposed = set()
    for a in get("EXPOSE"):
        for t in a.split():
            p = t.split("/", 1)[0]
            if p.isdigit():
                exposed.add(int(p))
    # gRPC and metrics: default.yaml's ports (make-config.sh keeps them); HTTP: the image config's, which
    # make-config.sh turns on (default.yaml has it off). The image serves the OpenAI API on a fixed port.
    http_port = image_cfg["server.http.listen.port"]
    if not http_port:
        problems.append(f"image config: server.http.listen is '{image_cfg['server.http.listen']}': the image must "
                        "serve the OpenAI HTTP API on a fixed port (make-config.sh turns it on)")
    want = {default_cfg["server.listen.port"], default_cfg["server.metrics_listen.port"]} | ({http_port} - {None, 0})
    if exposed != want:
        problems.append(f"Dockerfile: EXPOSE {sorted(exposed)}, but the image's frostd listens on {sorted(want)} "
                        "(configs/default.yaml's server.listen, server.metrics_listen; the image config's "
                        "server.http.listen)")
    for key in ("server.listen", "server.metrics_listen", "server.http.listen"):
        host = image_cfg[key].rsplit(":", 1)[0]
        if host not in ("0.0.0.0", "[::]", ""):
            problems.append(f"image config: {key} is '{image_cfg[key]}': unreachable from outside the container")

    # the state directory sits in a VOLUME (writable, kept)
    vols = []
    for a in get("VOLUME"):
        vols += _exec_form(a) or a.split()
    state = image_cfg["jobs.state_dir"]
    if not state.startswith("/") or not any(state == v or state.startswith(v.rstrip("/") + "/") for v in vols):
        problems.append(f"Dockerfile: jobs.state_dir '{state}' of the image config is not inside a VOLUME ({vols})")

    # the built-in model at model.path from the WORKDIR; other models only mounted
    workdirs = get("WORKDIR")
    wd = workdirs[-1] if workdirs else "/"
    model = image_cfg["model.path"]
    model_abs = model if model.startswith("/") else os.path.normpath(os.path.join(wd, model))
    model_copies = [(srcs, d) for _, srcs, d in copies if any(s.rstrip("/").startswith("models/") for s in srcs)]
    if not any(d.rstrip("/") == model_abs for _, d in model_copies):
        problems.append(f"Dockerfile: the image config's model.path '{model}' (from WORKDIR {wd}: {model_abs}) is "
                        f"not where the built-in model is copied ({[d for _, d in model_copies]})")
    for srcs, d in model_copies:
        if any(s.rstrip("/") != "models/stories260K" for s in srcs) or d.startswith("/models"):
            problems.append(f"Dockerfile: COPY {srcs} {d}: only models/stories260K is baked in; other models are "
                            "mounted at /models")
    return problems


def check_dockerignore(text):
    lines = {l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")}
    problems = []
    for need in (".git", "build", "build-*", "bench/results", "*.configure.log"):
        if need not in lines:
            problems.append(f".dockerignore: no '{need}' line (it would be sent to the build)")
    if any(l in ("models", "models/", "models/stories260K") for l in lines):
        problems.append(".dockerignore: excludes models/stories260K, which the image copies")
    return problems


def check_makefile(text):
    problems = []
    if not re.search(r"^IMAGE \?= frost:latest$", text, re.M):
        problems.append("Makefile: no 'IMAGE ?= frost:latest'")
    if not re.search(r"^image:", text, re.M) or not re.search(r"^\.PHONY:.*\bimage\b", text, re.M):
        problems.append("Makefile: no .PHONY 'image' target")
    return problems


# ---------------------------------------------------------------------------------------------------------

def make_image_config(src, tmp):
    out = os.path.join(tmp, "frost.yaml")
    r = subprocess.run(["sh", os.path.join(src, "deploy/image/make-config.sh"),
                        os.path.join(src, "configs/default.yaml"), out], capture_output=True, text=True)
    if r.returncode != 0:
        raise Fail(f"deploy/image/make-config.sh on configs/default.yaml failed (the image build would too): "
                   f"{r.stderr.strip()}")
    with open(out) as f:
        return config_facts(f.read())


def self_check(listed, libs_by_bin, dpkg, dockerfile, image_cfg, default_cfg, src, dlopened, bins, cuda_dirs=()):
    """The checks must fail on broken inputs. Returns (problems, load-bearing packages)."""
    problems = []
    bearing = []
    for p in listed:
        if check_libraries(libs_by_bin, [q for q in listed if q != p], dpkg, cuda_dirs):
            bearing.append(p)
    if not bearing:
        problems.append("self-check: dropping any one package from the list leaves every library covered; the "
                        "library check cannot fail as set up")

    def mutate(pattern, repl, expect):
        broken, n = re.subn(pattern, repl, dockerfile, flags=re.M)
        if n == 0:
            problems.append(f"self-check: cannot make the mutation /{pattern}/ (the Dockerfile changed shape)")
            return
        got = check_dockerfile(broken, image_cfg, default_cfg, src, dlopened)
        if not any(expect in g for g in got):
            problems.append(f"self-check: the Dockerfile with /{pattern}/ -> '{repl}' was not reported "
                            f"(expected a problem containing '{expect}'; got {got})")

    last_user = list(re.finditer(r"^USER .*$", dockerfile, re.M))
    if last_user:
        m = last_user[-1]
        broken = dockerfile[:m.start()] + "USER root" + dockerfile[m.end():]
        if not any("USER" in g and "root" in g for g in check_dockerfile(broken, image_cfg, default_cfg, src, dlopened)):
            problems.append("self-check: USER root in the final stage was not reported")
    mutate(r"^HEALTHCHECK .*(\\\n.*)*$", "", "no HEALTHCHECK")
    mutate(r"^EXPOSE .*$", "EXPOSE 50052 9090 8000", "EXPOSE")
    mutate(r"^EXPOSE .*$", "EXPOSE 50051 9090", "EXPOSE")  # the HTTP port left out
    mutate(r"^EXPOSE .*$", "EXPOSE 50051 9090 8080", "EXPOSE")  # another HTTP port than the image config's
    # The image config (what make-config.sh writes) broken instead: the HTTP API off, or on loopback only.
    for listen, expect in (("", "server.http.listen"), ("127.0.0.1:8000", "unreachable")):
        cfg = dict(image_cfg, **{"server.http.listen": listen,
                                 "server.http.listen.port": int(listen.rsplit(":", 1)[1]) if listen else None})
        if not any(expect in g for g in check_dockerfile(dockerfile, cfg, default_cfg, src, dlopened)):
            problems.append(f"self-check: an image config with server.http.listen '{listen}' was not reported")
    mutate(r"^FROM debian:bookworm AS runtime$", "FROM debian:bullseye AS runtime", "not Debian bookworm")
    mutate(r"^COPY deploy/image/runtime-packages\.txt", "COPY deploy/image/other.txt", "runtime-packages.txt")
    mutate(r'"--config", "/etc/frost/frost.yaml"', '"--config", "/etc/frost/other.yaml"', "--config")
    mutate(r"^WORKDIR .*$", "WORKDIR /", "model.path")
    mutate(r'^ARG CMAKE_FLAGS="', 'ARG CMAKE_FLAGS="-DFROST_CUDA=ON ', "builds with CUDA")
    mutate(r"^COPY core core$", "", "adds core/")
    if dlopened:
        if not check_runtime_loaded(bins, []):
            problems.append("self-check: without --dlopen, frostd's run-time libraries were not reported")
        base = re.escape(os.path.basename(dlopened[0]))
        mutate(rf"^COPY .*{base}.*$", "", "does not COPY")
        mutate(r"^RUN ldconfig$", "RUN true", "ldconfig")
    return problems, bearing


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frostd", required=True)
    ap.add_argument("--frostctl", required=True)
    ap.add_argument("--dlopen", action="append", default=[], metavar="LIB",
                    help="a library frostd loads at run time (repeatable): its libraries are checked too, and the "
                         "Dockerfile must ship it")
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--packages", help="package list to check (default: deploy/image/runtime-packages.txt)")
    ap.add_argument("--cuda-lib-dir", action="append", default=[], metavar="DIR",
                    help="the CUDA Toolkit's library folder of a FROST_CUDA build (repeatable): its libraries are "
                         "not the CPU image's to ship")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every library with its package")
    args = ap.parse_args()
    src = os.path.abspath(args.source_dir)
    t0 = time.monotonic()

    for tool in ("ldd", "dpkg-query"):
        if not shutil.which(tool):
            print(f"image_test: SKIP: no {tool} here (the library check needs a Debian build machine)")
            return SKIP
    if not os.path.exists("/var/lib/dpkg/status"):
        print("image_test: SKIP: no /var/lib/dpkg/status")
        return SKIP

    problems = []
    try:
        pkg_file = args.packages or os.path.join(src, "deploy/image/runtime-packages.txt")
        listed = read_package_list(pkg_file)
        dpkg = Dpkg()
        bins = [os.path.abspath(args.frostd), os.path.abspath(args.frostctl)]
        dlopened = [os.path.abspath(d) for d in args.dlopen]
        libs = library_packages(bins + dlopened)
        cuda_dirs = [os.path.realpath(d) for d in args.cuda_lib_dir]
        problems += check_libraries(libs, listed, dpkg, cuda_dirs)
        n_cuda = sorted({os.path.basename(p) for rows in libs.values() for _, p, pkg in rows
                         if pkg is None and under(p, cuda_dirs)})
        if n_cuda:
            print(f"image_test: a FROST_CUDA build: {', '.join(n_cuda)} come from the CUDA Toolkit "
                  f"({', '.join(cuda_dirs)}), not shipped by the CPU image (built without FROST_CUDA)")
        problems += check_runtime_loaded(bins, dlopened)

        with open(os.path.join(src, "configs/default.yaml")) as f:
            default_cfg = config_facts(f.read())
        with tempfile.TemporaryDirectory() as tmp:
            image_cfg = make_image_config(src, tmp)
        with open(os.path.join(src, "Dockerfile")) as f:
            dockerfile = f.read()
        problems += check_dockerfile(dockerfile, image_cfg, default_cfg, src, dlopened)
        with open(os.path.join(src, ".dockerignore")) as f:
            problems += check_dockerignore(f.read())
        with open(os.path.join(src, "Makefile")) as f:
            problems += check_makefile(f.read())

        sc, bearing = self_check(listed, libs, dpkg, dockerfile, image_cfg, default_cfg, src, dlopened, bins, cuda_dirs)
        problems += sc
    except Fail as e:
        problems.append(str(e))
        libs, bearing, listed = {}, [], []

    if args.verbose:
        for b, rows in libs.items():
            print(f"{b}:")
            for soname, path, pkg in rows:
                print(f"  {soname:40s} {pkg or '?':28s} {path}")
    if libs:
        closure, unresolved = dpkg.closure(listed)
        allpk = {pkg for rows in libs.values() for _, _, pkg in rows}
        print(f"image_test: {', '.join(f'{os.path.basename(b)} {len(r)} libraries' for b, r in libs.items())} "
              f"from {len(allpk)} packages; runtime-packages.txt: {len(listed)} listed, {len(closure)} with "
              "their dependencies")
        if not problems:
            print(f"image_test: self-check: dropping any of {', '.join(bearing)} from the list fails the check; "
                  "so do USER root, no HEALTHCHECK, a wrong EXPOSE (or none for HTTP), the HTTP API off or on loopback in the "
                  "image config, FROM bullseye, another list file, another "
                  "--config, another WORKDIR, a source directory or a dlopen()ed library not copied, no ldconfig")
        if args.verbose and unresolved:
            for pkg, clause in unresolved:
                print(f"  (not followed: {pkg} depends on '{clause}', not installed here)")
    for p in problems:
        print(f"FAIL: {p}")
    print(f"image_test: {'FAILED' if problems else 'ok'} ({len(problems)} problem(s), "
          f"{time.monotonic() - t0:.1f} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
