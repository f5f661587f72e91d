#!/usr/bin/python3
"""The layer check fails the build on a bad include (issue 41: "a test include of a higher layer fails the
build").

core/CMakeLists.txt runs tests/layers_test.py as the custom command every core layer depends on
(frost_layer_check): a failing check stops the build before any layer compiles. This test proves both halves:
  1. the wiring: every frost_core_layer depends on frost_layer_check, and the check's command is
     layers_test.py over the source tree with the core and kernels sources as its dependencies (so adding or
     changing a file re-runs it);
  2. the check itself, on a scratch copy of core/ and kernels/ holding one probe file at a time: an upward
     include (store → jobs), a sideways include (prototype → generate), core including server/, and kernels
     including core/ each fail naming the probe's file:line; the unmodified copy passes.

Usage: layers_selftest.py SOURCE_DIR
"""

import os
import shutil
import subprocess
import sys
import tempfile

PROBES = [
    ("core/store/zz_probe_upward.h", '#include "core/jobs/scheduler.h"\n',
     "core/store/zz_probe_upward.h:1: includes core/jobs/scheduler.h: frost_store does not link frost_jobs"),
    ("core/prototype/zz_probe_sideways.cc", '// probe\n#include "core/generate/engine.h"\n',
     "core/prototype/zz_probe_sideways.cc:2: includes core/generate/engine.h: frost_prototype does not link "
     "frost_generate"),
    ("core/serving/zz_probe_jobs.h", '#include "core/jobs/job_spec.h"\n',
     "core/serving/zz_probe_jobs.h:1: includes core/jobs/job_spec.h: frost_serving does not link frost_jobs"),
    ("core/model/zz_probe_server.h", '#include "server/runtime.h"\n',
     "core/model/zz_probe_server.h:1: includes server/runtime.h: core and kernels build without the server"),
    ("kernels/cpu/zz_probe_core.h", '#include "core/common/log.h"\n',
     "kernels/cpu/zz_probe_core.h:1: includes core/common/log.h: kernels sit below core"),
]


def run_check(src, scratch):
    p = subprocess.run([sys.executable, os.path.join(src, "tests", "layers_test.py"), scratch],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    failures = []
    cmake = open(os.path.join(src, "core", "CMakeLists.txt")).read()
    fn = cmake[cmake.index("function(frost_core_layer"):cmake.index("endfunction()")]
    if "add_dependencies(${name} frost_layer_check)" not in fn:
        failures.append("frost_core_layer does not make each layer depend on frost_layer_check")
    for want in ("tests/layers_test.py ${PROJECT_SOURCE_DIR}", "DEPENDS ${FROST_LAYERED_SOURCES}",
                 "add_dependencies(frost_layer_check frost_layer_check_run)"):
        if want not in cmake:
            failures.append(f"core/CMakeLists.txt no longer has `{want}`: the build would not run the check")
    with tempfile.TemporaryDirectory(prefix="frost-layers-") as scratch:
        for top in ("core", "kernels"):
            shutil.copytree(os.path.join(src, top), os.path.join(scratch, top),
                            ignore=shutil.ignore_patterns("*.o", "__pycache__"))
        rc, out = run_check(src, scratch)
        if rc != 0:
            failures.append(f"the unmodified copy fails the check:\n{out}")
        for rel, text, message in PROBES:
            path = os.path.join(scratch, rel)
            with open(path, "w") as f:
                f.write(text)
            rc, out = run_check(src, scratch)
            os.remove(path)
            if rc == 0:
                failures.append(f"{rel} ({text.strip()}) passed the check")
            elif message not in out:
                failures.append(f"{rel}: the check failed without naming it as expected ({message!r}):\n{out}")
    for f in failures:
        print("layers_selftest: FAIL:", f)
    print(f"layers_selftest: {len(PROBES)} probes, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
