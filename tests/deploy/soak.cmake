# soak_*: the soak and fault suites of tests/soak/soak_test.py at CI scale (SOAK_SCALE=ci, about 3 minutes in
# all on 2 cores), one ctest each, label integration; `make soak` runs them at full scale. Each prints its
# figure line and writes <build>/soak/<suite>.json. The job suites need ../shared (stories260K, emobank) and
# the disk-full suite root (a tmpfs mount): without them they are skipped (exit 77). slow_readers and health
# measure latency and throughput, so they run alone (RUN_SERIAL).
# frostd and frost-loadgen are defined after tests/: registered once the whole tree has been read (a deferred
# call in the top-level directory, like python_jobs in tests/CMakeLists.txt), and only when frostd exists.
if(FROST_BUILD_SERVER)
  function(frost_add_soak_tests)
    if(NOT TARGET frostd)
      message(STATUS "frost: no frostd target, soak tests not registered")
      return()
    endif()
    set(suites streams kill9 disk_full corrupt)
    if(TARGET frost-loadgen)
      list(APPEND suites slow_readers health)
    else()
      message(STATUS "frost: no frost-loadgen target, soak_slow_readers and soak_health not registered")
    endif()
    set(timeouts streams=180 kill9=300 disk_full=240 corrupt=240 slow_readers=180 health=180)
    foreach(suite ${suites})
      set(name soak_${suite})
      add_test(NAME ${name}
        COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/soak/soak_test.py ${suite}
        WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
      set(env
        "PYTHONPATH=${CMAKE_BINARY_DIR}/client/python:${PROJECT_SOURCE_DIR}/client/python"
        "FROST_FROSTD=$<TARGET_FILE:frostd>"
        "FROST_SHARED=${PROJECT_SOURCE_DIR}/../shared"
        "SOAK_SCALE=ci"
        "SOAK_OUT=${CMAKE_BINARY_DIR}/soak/${suite}.json")
      if(TARGET frost-loadgen)
        list(APPEND env "FROST_LOADGEN=$<TARGET_FILE:frost-loadgen>")
      endif()
      set(timeout 240)
      foreach(t ${timeouts})
        if(t MATCHES "^${suite}=([0-9]+)$")
          set(timeout ${CMAKE_MATCH_1})
        endif()
      endforeach()
      set_tests_properties(${name} PROPERTIES
        ENVIRONMENT "${env}"
        LABELS integration
        TIMEOUT ${timeout}
        SKIP_RETURN_CODE 77)
      if(suite STREQUAL "slow_readers" OR suite STREQUAL "health")
        set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL frost_add_soak_tests)
endif()
