#!/usr/bin/env bash
# Coverage-guided fuzzing of frost's parsers of untrusted bytes (docs/fuzzing.md): builds the libFuzzer
# targets of tests/fuzz in a separate build directory with clang, ASan and UBSan, runs each for
# FUZZ_SECONDS, one after another, and reports per target the executions per second, coverage (libFuzzer's
# final cov: / ft:), corpus size and status, as a table and as JSON (FUZZ_JSON).
#
#   scripts/fuzz.sh                      every target, FUZZ_SECONDS (60) each → bench/results/fuzz.json
#   FUZZ_TARGETS="safetensors job_spec" FUZZ_SECONDS=300 scripts/fuzz.sh
#
# Knobs (environment): FUZZ_SECONDS (60), FUZZ_TARGETS (all; short names, e.g. model_config), FUZZ_BUILD
# (build-fuzz), FUZZ_WORK (new corpus entries and crash inputs; $FUZZ_BUILD/fuzz-work — never the
# repository's seed corpora), FUZZ_JSON (bench/results/fuzz.json; empty = none), FUZZ_RSS_MB (2048: the
# process's memory limit), FUZZ_MALLOC_MB (512: the largest single allocation; the inputs are small, so a
# larger one is a runaway, reported at once with its stack), FUZZ_BUILD_ONLY=1 (configure and build, run
# nothing), JOBS (build parallelism, 2).
#
# Exit status: 0 when every target ran its time without a finding; 1 otherwise, naming the input that
# reproduces each finding (replay: $FUZZ_BUILD/tests/fuzz/<target>_fuzz <input>). A reproducer that is a
# real bug belongs in tests/fuzz/corpus/<target>/regress-<what> once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_WORK=${FUZZ_WORK:-$FUZZ_BUILD/fuzz-work}
FUZZ_JSON=${FUZZ_JSON-bench/results/fuzz.json}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-2048}
FUZZ_MALLOC_MB=${FUZZ_MALLOC_MB:-512}
FUZZ_TARGETS=${FUZZ_TARGETS:-}
JOBS=${JOBS:-2}

# 1. clang with its libFuzzer / sanitizer runtimes, clang's OpenMP (the top-level configure looks for
#    OpenMP; the fuzz targets themselves do not use it) and llvm (llvm-symbolizer: findings with file:line
#    stacks), installed like install_deps.sh's (scripts/apt_install_missing.sh).
PKGS=(clang libclang-rt-dev libomp-dev llvm)
bash scripts/apt_install_missing.sh fuzz "${PKGS[@]}"

# 2. configure (once) and build the targets.
if [[ ! -f $FUZZ_BUILD/CMakeCache.txt ]] || ! grep -q '^FROST_FUZZ:BOOL=ON' "$FUZZ_BUILD/CMakeCache.txt"; then
  cmake -S . -B "$FUZZ_BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Fuzz -DFROST_FUZZ=ON -DFROST_BUILD_TESTS=OFF -DFROST_BUILD_BENCH=OFF \
    > "$FUZZ_BUILD.configure.log" 2>&1 || { cat "$FUZZ_BUILD.configure.log"; exit 1; }
fi
all=$(tr ';' ' ' < "$FUZZ_BUILD/fuzz-targets.txt")
if [[ -z $FUZZ_TARGETS ]]; then
  FUZZ_TARGETS=${all//_fuzz/}
fi
build_targets=()
for t in $FUZZ_TARGETS; do
  if [[ " $all " != *" ${t}_fuzz "* ]]; then
    echo "fuzz: unknown target '$t' (targets: ${all//_fuzz/})" >&2
    exit 2
  fi
  build_targets+=("${t}_fuzz")
done
cmake --build "$FUZZ_BUILD" -j "$JOBS" --target "${build_targets[@]}"
if [[ ${FUZZ_BUILD_ONLY:-0} == 1 ]]; then exit 0; fi

# 3. run each target: the seeds (and regression inputs) first, then FUZZ_SECONDS of fuzzing.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
results=$FUZZ_WORK/results.tsv
mkdir -p "$FUZZ_WORK"
: > "$results"
failed=0
for t in $FUZZ_TARGETS; do
  work=$FUZZ_WORK/$t
  mkdir -p "$work/corpus" "$work/findings"
  args=("$work/corpus")
  # the repository's seeds and regression inputs, and the tensor-file seeds generated into the build
  # directory (tests/fuzz/CMakeLists.txt); a target may have either or both
  for seeds in "tests/fuzz/corpus/$t" "$FUZZ_BUILD/tests/fuzz/generated/corpus/$t"; do
    [[ -d $seeds ]] && args+=("$seeds")
  done
  args+=(-max_total_time="$FUZZ_SECONDS" -print_final_stats=1
        -rss_limit_mb="$FUZZ_RSS_MB" -malloc_limit_mb="$FUZZ_MALLOC_MB" -timeout=25 -artifact_prefix="$work/findings/")
  [[ -f tests/fuzz/$t.dict ]] && args+=(-dict="tests/fuzz/$t.dict")
  echo "== $t: ${FUZZ_SECONDS}s"
  start=$(date +%s)
  rc=0
  # A hard stop past the budget: an out-of-memory report can take minutes to print under ASan.
  timeout -k 10 $((FUZZ_SECONDS + 120)) "$FUZZ_BUILD/tests/fuzz/${t}_fuzz" "${args[@]}" > "$work/log" 2>&1 || rc=$?
  seconds=$(($(date +%s) - start))
  finding=$(grep -o 'Test unit written to .*' "$work/log" | tail -1 | sed 's/Test unit written to //' || true)
  printf '%s\t%s\t%s\t%s\n' "$t" "$rc" "$seconds" "$finding" >> "$results"
  if ((rc != 0)); then
    failed=1
    echo "fuzz: $t FAILED (exit $rc)${finding:+; reproduce: $FUZZ_BUILD/tests/fuzz/${t}_fuzz $finding}"
    grep -E 'ERROR: |FROST_FUZZ_CHECK|runtime error|SUMMARY' "$work/log" | head -5 || true
  fi
done

# 4. figures: libFuzzer's last status line (cov, ft, corp) and final stats of each log.
python3 - "$results" "$FUZZ_WORK" "$FUZZ_SECONDS" "${FUZZ_JSON}" <<'EOF'
import datetime, json, os, platform, re, subprocess, sys

results, work, budget, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def cpu():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()
def clang():
    try:
        return subprocess.run(["clang++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except Exception:
        return ""

status_re = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\d+)(b|Kb|Mb)")
rows = []
for line in open(results):
    name, rc, seconds, finding = line.rstrip("\n").split("\t")
    log = open(os.path.join(work, name, "log"), errors="replace").read()
    r = {"target": name, "seconds": int(seconds), "status": "ok" if rc == "0" else "finding (exit %s)" % rc}
    if finding:
        r["finding"] = finding
    last = None
    for l in log.splitlines():
        m = status_re.match(l)
        if m:
            last = m
    if last:
        unit = {"b": 1, "Kb": 1024, "Mb": 1024 * 1024}[last.group(6)]
        r.update(execs=int(last.group(1)), cov=int(last.group(2)), ft=int(last.group(3)),
                 corpus_entries=int(last.group(4)), corpus_bytes=int(last.group(5)) * unit)
    for key in ("number_of_executed_units", "average_exec_per_sec", "new_units_added", "peak_rss_mb"):
        m = re.search(r"stat::%s:\s+(\d+)" % key, log)
        if m:
            r[key] = int(m.group(1))
    if "number_of_executed_units" in r:
        r["execs"] = r.pop("number_of_executed_units")
    if "average_exec_per_sec" in r:
        r["execs_per_s"] = r.pop("average_exec_per_sec")
    rows.append(r)

print()
print("%-18s %8s %10s %8s %7s %7s %14s  %s" % ("target", "seconds", "execs/s", "execs", "cov", "ft", "corpus", "status"))
for r in rows:
    corpus = "%d / %dKiB" % (r.get("corpus_entries", 0), r.get("corpus_bytes", 0) // 1024)
    print("%-18s %8d %10s %8s %7s %7s %14s  %s" % (r["target"], r["seconds"], r.get("execs_per_s", "?"),
          r.get("execs", "?"), r.get("cov", "?"), r.get("ft", "?"), corpus, r["status"]))
if out:
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "machine": cpu(), "cores": os.cpu_count(), "compiler": clang(),
           "sanitizers": "address,undefined (libFuzzer)", "seconds_per_target": budget, "targets": rows}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("\nfuzz: wrote", out)
EOF
exit $failed
