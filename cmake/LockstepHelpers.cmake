# Shared CMake helpers: warnings, sanitizers, and test registration.

function(lockstep_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter -Winvalid-pch)
  if(LOCKSTEP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(LOCKSTEP_SANITIZE_ADDRESS)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
if(LOCKSTEP_SANITIZE_THREAD)
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
endif()

# lockstep_add_test(NAME <name> SOURCES <files...> [LABELS <labels...>] [TIMEOUT <s>])
# Builds one GoogleTest binary and registers it with CTest under the labels.
function(lockstep_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE lockstep lockstep_test_support lockstep_test_main GTest::gtest fmt::fmt)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  lockstep_torch_pch(${T_NAME} REUSE_FROM lockstep_test_support)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  # A gtest skip reaches CTest as a skip, not a pass (tests/support/gtest_main.cpp exits 77).
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "LOCKSTEP_BIN=$<TARGET_FILE:lockstep_cli>;LOCKSTEP_TEST_HELPER_DIR=${CMAKE_CURRENT_BINARY_DIR}")
endfunction()

# lockstep_torch_pch(<target> [REUSE_FROM <other>])
# LibTorch's headers make most of a translation unit's compile time: compile them once per
# target (or once for targets built with the same flags) as a precompiled header. Off by
# default: the precompiled <torch/torch.h> is so large that loading it costs a light
# translation unit about what it saves a heavy one (docs/dependencies.md, "Build time").
option(LOCKSTEP_PRECOMPILED_HEADERS "Precompile LibTorch's headers" OFF)
function(lockstep_torch_pch target)
  cmake_parse_arguments(P "" "REUSE_FROM" "" ${ARGN})
  if(NOT LOCKSTEP_PRECOMPILED_HEADERS)
    return()
  endif()
  if(P_REUSE_FROM)
    target_precompile_headers(${target} REUSE_FROM ${P_REUSE_FROM})
  else()
    target_precompile_headers(${target} PRIVATE <torch/torch.h>)
  endif()
endfunction()

# lockstep_unity_batches(<target>)
# LibTorch's headers are most of a translation unit's compile time, and each .cpp parses them
# again: compiled in batches of LOCKSTEP_UNITY_BATCH_SIZE sources (CMake's unity build), one
# parse serves a batch. Sources are batched in the order the target lists them, so a batch is
# mostly one layer's files. A source that cannot share a translation unit (its own compile
# options) sets SKIP_UNITY_BUILD_INCLUSION.
option(LOCKSTEP_UNITY_BUILD "Compile the libraries' and the CLI's sources in batches" ON)
set(LOCKSTEP_UNITY_BATCH_SIZE 8 CACHE STRING "Sources per unity batch (LOCKSTEP_UNITY_BUILD)")
function(lockstep_unity_batches target)
  if(LOCKSTEP_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH
                                               UNITY_BUILD_BATCH_SIZE ${LOCKSTEP_UNITY_BATCH_SIZE})
  endif()
endfunction()
