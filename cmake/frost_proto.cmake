# frost_add_proto_library(<target> PROTOS <file.proto>...)
#
# Runs protoc + grpc_cpp_plugin on each .proto (paths relative to the current source dir,
# which is also the import root) into ${CMAKE_CURRENT_BINARY_DIR}/gen and builds a static
# library <target> from the generated .pb.cc / .grpc.pb.cc. The generated root is a PUBLIC
# include dir, so `proto/frost/v1/generation.proto` is included as
# `#include "frost/v1/generation.grpc.pb.h"`. Expects find_package(Protobuf) and
# find_package(gRPC CONFIG) to have run.

# protoc: the protobuf::protoc imported target (FindProtobuf) or, failing that, PATH.
if(TARGET protobuf::protoc)
  set(FROST_PROTOC protobuf::protoc)
else()
  find_program(FROST_PROTOC_PROGRAM protoc REQUIRED)
  set(FROST_PROTOC ${FROST_PROTOC_PROGRAM})
endif()
# grpc_cpp_plugin: the gRPC::grpc_cpp_plugin imported target or, failing that, PATH.
if(TARGET gRPC::grpc_cpp_plugin)
  set(FROST_GRPC_CPP_PLUGIN $<TARGET_FILE:gRPC::grpc_cpp_plugin>)
else()
  find_program(FROST_GRPC_CPP_PLUGIN_PROGRAM grpc_cpp_plugin REQUIRED)
  set(FROST_GRPC_CPP_PLUGIN ${FROST_GRPC_CPP_PLUGIN_PROGRAM})
endif()

function(frost_add_proto_library target)
  cmake_parse_arguments(P "" "" "PROTOS" ${ARGN})
  if(NOT P_PROTOS)
    message(FATAL_ERROR "frost_add_proto_library(${target}): no PROTOS given")
  endif()
  set(gen_root ${CMAKE_CURRENT_BINARY_DIR}/gen)
  file(MAKE_DIRECTORY ${gen_root})
  set(generated_srcs)
  foreach(proto IN LISTS P_PROTOS)
    get_filename_component(proto_abs ${proto} ABSOLUTE)
    file(RELATIVE_PATH proto_rel ${CMAKE_CURRENT_SOURCE_DIR} ${proto_abs})
    string(REGEX REPLACE "\\.proto$" "" stem ${proto_rel})
    set(outs
      ${gen_root}/${stem}.pb.cc ${gen_root}/${stem}.pb.h
      ${gen_root}/${stem}.grpc.pb.cc ${gen_root}/${stem}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${outs}
      COMMAND ${FROST_PROTOC}
        --proto_path=${CMAKE_CURRENT_SOURCE_DIR}
        --cpp_out=${gen_root}
        --grpc_out=${gen_root}
        --plugin=protoc-gen-grpc=${FROST_GRPC_CPP_PLUGIN}
        ${proto_rel}
      WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
      DEPENDS ${proto_abs}
      COMMENT "protoc ${proto_rel}"
      VERBATIM)
    list(APPEND generated_srcs ${gen_root}/${stem}.pb.cc ${gen_root}/${stem}.grpc.pb.cc)
  endforeach()

  add_library(${target} STATIC ${generated_srcs})
  # Generated code is compiled without frost_target_warnings(): it is not ours to fix.
  target_include_directories(${target} PUBLIC ${gen_root})
  target_link_libraries(${target} PUBLIC gRPC::grpc++ protobuf::libprotobuf)
endfunction()
