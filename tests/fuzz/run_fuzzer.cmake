# ctest driver of one fuzz target (tests/fuzz/CMakeLists.txt): replays every seed and regression input of
# SEEDS, then fuzzes for SECONDS, writing new inputs to the scratch corpus WORK (never to the repository).
# Fails when the fuzzer finds a crash, leak, UB or broken check; the input is left in WORK/../artifacts.
file(MAKE_DIRECTORY ${WORK} ${WORK}-artifacts)
set(args ${WORK} ${SEEDS} -max_total_time=${SECONDS} -print_final_stats=1 -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=25
  -artifact_prefix=${WORK}-artifacts/)
if(DICT)
  list(APPEND args ${DICT})
endif()
execute_process(COMMAND ${FUZZER} ${args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the input is in ${WORK}-artifacts/")
endif()
