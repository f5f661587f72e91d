#!/usr/bin/python3
"""Soak and fault suites of frostd (issue "Hardening"): each starts its own frostd processes on free ports,
drives them through the generated Python stubs, checks its invariants and prints one figure line
("soak.<suite>: ..."). Exit status 1 when a check failed, 77 when every suite asked for was skipped.

Suites (all by default, or those named on the command line):
  streams       N streams x 64 tokens, 20% cancelled at random points, 64 concurrent: the others complete
                exactly, frostd's counters match what the clients saw, RSS after the run within 5% of after
                warm-up, no stream left hanging (each has a deadline).
  slow_readers  clients that stop reading mid-stream (raw HTTP/2, tests/soak/h2stall.py): frostd sends no
                more than their flow-control window, its memory per stalled stream is bounded, the other
                streams (frost-loadgen) keep their throughput and inter-token latency, the stalled calls end
                at their deadline and are counted DEADLINE_EXCEEDED.
  health        every engine slot busy and the waiting queue full (frost-loadgen): liveness ("") and
                readiness (frost.v1.Generation) Check p99 < 250 ms, on one channel and on a new connection.
  kill9         kill -9 of frostd at random points of training jobs, restarts on the same state directory:
                no acknowledged job lost or duplicated, each job SUCCEEDED bit-identical to an uninterrupted
                run, or INTERRUPTED naming max_attempts.
  disk_full     jobs.state_dir on a tmpfs of a few MiB filled up: jobs fail with a reason naming the
                full disk, serving (Generate, Predict, health) continues, the journal and the active artifact
                stay intact (and load again after a restart); a restart on the full volume serves Predict,
                reports jobs unavailable and takes them back once there is space. Needs root (mount);
                skipped otherwise.
  corrupt       truncated and bit-flipped artifact files and job journals: refused at start or at
                activation with a message naming the file, never served, never replaced.

Scale: SOAK_SCALE=ci (default: scaled down, about 3 minutes on 2 cores) or SOAK_SCALE=full (`make soak`).
Report: --out PATH (default: $SOAK_OUT, else bench/results/soak.json at full scale, else
<build>/soak/soak.json), merged with the suites already there.

Environment: FROST_FROSTD (frostd), FROST_LOADGEN (frost-loadgen; default <build>/bench/frost-loadgen),
FROST_SHARED (../shared: stories260K and emobank for the job suites), PYTHONPATH with <build>/client/python.

By hand:
  PYTHONPATH=build/client/python FROST_FROSTD=build/server/frostd /usr/bin/python3 tests/soak/soak_test.py streams
"""

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Each suite lives in its own module (soak_<suite>.py); soak_common.py imports the stubs (exit 1 without them).
from soak_common import lib, sl  # noqa: E402
from soak_corrupt import suite_corrupt  # noqa: E402
from soak_disk_full import suite_disk_full  # noqa: E402
from soak_kill9 import suite_kill9  # noqa: E402
from soak_serving import suite_health, suite_slow_readers  # noqa: E402
from soak_streams import suite_streams  # noqa: E402

SUITES = {
    "streams": suite_streams,
    "slow_readers": suite_slow_readers,
    "health": suite_health,
    "kill9": suite_kill9,
    "disk_full": suite_disk_full,
    "corrupt": suite_corrupt,
}


def default_out():
    if os.environ.get("SOAK_OUT"):
        return os.environ["SOAK_OUT"]
    if sl.scale() == "full":
        return os.path.join(sl.SOURCE_DIR, "bench", "results", "soak.json")
    build = os.path.dirname(os.path.dirname(lib.frostd_binary()))
    return os.path.join(build, "soak", "soak.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suites", nargs="*", choices=list(SUITES) + [[]], default=[],
                    help="suites to run (default: all)")
    ap.add_argument("--out", help="JSON report (merged with the suites already in it)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = ap.parse_args()
    names = args.suites or list(SUITES)
    out = args.out or default_out()
    lib.frostd_binary()  # fails early without FROST_FROSTD
    print(f"soak: scale {sl.scale()}, suites {' '.join(names)}, report {out}", flush=True)
    done = []
    t0 = time.monotonic()
    for name in names:
        suite = sl.Suite(name)
        tmp = sl.tempdir(f"frost-soak-{name}-")
        try:
            SUITES[name](suite, tmp)
        except Exception as e:  # a crashed suite is a failed one; the others still run
            import traceback
            traceback.print_exc()
            suite.check(False, f"suite raised {type(e).__name__}: {str(e)[:3000]}")
        finally:
            if args.keep or suite.failures:
                print(f"soak.{name}: files kept in {tmp}", flush=True)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        if not suite.line:
            suite.report("FAILED before its figure" if suite.failures else "no figure")
        done.append(suite)
        sl.write_report(out, [suite])
    failed = [s.name for s in done if s.failures]
    print(f"soak: {len(done)} suites in {time.monotonic() - t0:.0f} s, "
          f"{'failed: ' + ' '.join(failed) if failed else 'all passed'}; report {out}", flush=True)
    if failed:
        return 1
    if all(s.skipped for s in done):
        return sl.SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
