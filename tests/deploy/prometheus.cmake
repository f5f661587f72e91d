# Prometheus rules (deploy/prometheus) and the Grafana dashboard (deploy/grafana).
#
# prometheus_rules (unit): promtool checks frost-rules.yaml and runs its unit tests
# (frost-rules.test.yaml: every alert firing and not firing on synthetic series).
# prometheus_live (integration): tests/deploy/prometheus_test.py runs the real Prometheus server
# against a real frostd under load and evaluates every rule and dashboard query (about 15 s).
# promtool and prometheus come from Debian's `prometheus` package (scripts/install_deps.sh); a
# missing binary fails the tests rather than skipping them.
find_program(FROST_PROMTOOL promtool)
find_program(FROST_PROMETHEUS_SERVER prometheus)
set(_frost_promtool ${FROST_PROMTOOL})
if(NOT FROST_PROMTOOL)
  set(_frost_promtool promtool)
endif()

add_test(NAME prometheus_rules
  COMMAND /bin/sh -c "\"$0\" check rules frost-rules.yaml && \"$0\" test rules frost-rules.test.yaml"
          ${_frost_promtool}
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/prometheus)
set_tests_properties(prometheus_rules PROPERTIES LABELS unit TIMEOUT 60)

# Registered after the whole tree has been read (the frostd target is defined later), like python_jobs.
function(frost_add_prometheus_live_test)
  if(NOT TARGET frostd)
    message(STATUS "frost: no frostd target, prometheus_live test not registered")
    return()
  endif()
  set(prometheus ${FROST_PROMETHEUS_SERVER})  # a cache entry: visible here, at the top level
  if(NOT prometheus)
    set(prometheus /usr/bin/prometheus)
  endif()
  add_test(NAME prometheus_live
    COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/prometheus_test.py
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set(env
    "PYTHONPATH=${CMAKE_BINARY_DIR}/client/python:${PROJECT_SOURCE_DIR}/client/python"
    "FROST_FROSTD=$<TARGET_FILE:frostd>"
    "FROST_SHARED=${PROJECT_SOURCE_DIR}/../shared"
    "FROST_PROMETHEUS=${prometheus}")
  set_tests_properties(prometheus_live PROPERTIES
    ENVIRONMENT "${env}"
    LABELS integration
    TIMEOUT 300)
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL frost_add_prometheus_live_test)
