"""Shared pieces of the soak and fault suites (tests/soak/soak_test.py): the scale knob, the figure lines and
the JSON report, frostd's /metrics and RSS, and frostd processes on free ports (tests/client/frost_testlib.py).
"""

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "client"))

import frost_testlib as lib  # noqa: E402  (needs the generated stubs on PYTHONPATH)

SKIP = 77  # ctest SKIP_RETURN_CODE: the suite cannot run here (no root for a mount, no shared data)


def scale():
    s = os.environ.get("SOAK_SCALE", "ci")
    if s not in ("ci", "full"):
        raise SystemExit(f"SOAK_SCALE must be ci or full (got {s!r})")
    return s


def pick(ci, full):
    return full if scale() == "full" else ci


def repo_model():
    """models/stories260K of this repository (the serving suites; the job suites use ../shared's copy like
    tests/client/jobs_test.py). SOAK_MODEL overrides it (e.g. builtin:tiny for a sanitizer build of frostd, which
    cannot load sentencepiece)."""
    return os.environ.get("SOAK_MODEL") or os.path.join(SOURCE_DIR, "models", "stories260K")


def loadgen_binary():
    b = os.environ.get("FROST_LOADGEN") or os.path.join(os.path.dirname(os.path.dirname(lib.frostd_binary())),
                                                        "bench", "frost-loadgen")
    if not os.access(b, os.X_OK):
        raise RuntimeError(f"frost-loadgen not found (FROST_LOADGEN or <build>/bench/frost-loadgen): {b}")
    return b


def machine():
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count()}


# ---------------------------------------------------------------------------------------------- results


class Suite:
    """One suite's outcome: figures (JSON), one printed figure line, and the failed checks."""

    def __init__(self, name):
        self.name = name
        self.figures = {}
        self.failures = []
        self.line = ""
        self.skipped = None
        self.t0 = time.monotonic()

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
            print(f"soak.{self.name}: FAIL: {what}", flush=True)
        return ok

    def fig(self, **kw):
        self.figures.update(kw)

    def report(self, line):
        self.line = f"soak.{self.name}: {line}"
        print(self.line, flush=True)

    def skip(self, why):
        self.skipped = why
        self.line = f"soak.{self.name}: SKIPPED ({why})"
        print(self.line, flush=True)

    def as_json(self):
        return {"scale": scale(), "ok": not self.failures and self.skipped is None, "skipped": self.skipped,
                "figure": self.line, "failures": self.failures, "wall_s": round(time.monotonic() - self.t0, 1),
                **self.figures}


def write_report(path, suites):
    doc = {}
    if os.path.exists(path):  # suites run one by one (ctest) merge into one file
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = {}
    doc.update({"bench": "soak", "scale": scale(), "machine": machine(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    doc.setdefault("suites", {})
    for s in suites:
        doc["suites"][s.name] = s.as_json()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- frostd


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    """A parsed /metrics scrape: value(name, **labels) sums the samples whose labels include `labels`."""

    def __init__(self, text):
        self.text = text
        self.samples = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            if m:
                labels = dict(_LABEL.findall(m.group(2) or ""))
                self.samples.append((m.group(1), labels, float(m.group(3))))

    def value(self, name, **labels):
        return sum(v for n, ls, v in self.samples
                   if n == name and all(ls.get(k) == want for k, want in labels.items()))

    def by_label(self, name, label, **labels):
        out = {}
        for n, ls, v in self.samples:
            if n == name and all(ls.get(k) == want for k, want in labels.items()):
                out[ls.get(label, "")] = out.get(ls.get(label, ""), 0) + v
        return out


def scrape(server):
    return Metrics(server.metrics_text())


def wait_metrics(server, pred, timeout=60, every=0.05):
    """Scrapes until pred(Metrics) holds; returns the last scrape and whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(server)
        if pred(m):
            return m, True
        if time.monotonic() > deadline:
            return m, False
        time.sleep(every)


def idle(m):
    return m.value("frost_requests_running") == 0 and m.value("frost_requests_waiting") == 0


def start_frostd(workdir, name, model=None, sections=None, jobs=None, env=None, data_root=None):
    """frost_testlib.Frostd (jobs on <workdir>/<name>-state) started; `model` defaults to stories260K."""
    state = os.path.join(workdir, f"{name}-state")
    return lib.Frostd(workdir, name, state, data_root or workdir, model=model, sections=sections, jobs=jobs,
                      env=env).start()


def tempdir(prefix):
    return tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("SOAK_TMP") or None)


def pct(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def mib(b):
    return b / (1 << 20)
