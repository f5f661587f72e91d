# ctest driver of one fuzz target (tests/fuzz/CMakeLists.txt): replays every seed and regression input of
# SEEDS and GENERATED, then fuzzes for SECONDS, writing new inputs to the scratch corpus WORK (never to the repository).
# Fails when the fuzzer finds a crash, leak, UB or broken check; the input is left in WORK/../artifacts.
file(MAKE_DIRECTORY ${WORK} ${WORK}-artifacts)
# SEEDS: the repository's seeds and regression inputs; GENERATED: the tensor-file seeds generated into the
# build directory (tests/fuzz/CMakeLists.txt). A target may have either or both.
set(args ${WORK})
foreach(dir ${SEEDS} ${GENERATED})
  if(EXISTS ${dir})
    list(APPEND args ${dir})
  endif()
endforeach()
list(APPEND args -max_total_time=${SECONDS} -print_final_stats=1 -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=25
  -artifact_prefix=${WORK}-artifacts/)
if(DICT)
  list(APPEND args ${DICT})
endif()
execute_process(COMMAND ${FUZZER} ${args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the input is in ${WORK}-artifacts/")
endif()
