# The sweep layer (`lockstep sweep`): a static library linked into the CLI and
# its tests. It runs `lockstep train` as child processes and reads their
# result files; it uses the core only for the train config (checking a space
# against the base config, writing best.yaml) and lockstep::Error.
# include()d from the top CMakeLists after lockstep_cli is defined.
add_library(lockstep_sweep STATIC
  ${CMAKE_CURRENT_LIST_DIR}/search_space.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sweep_spec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tpe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trial_record.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trial_process.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trial_launcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slurm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sweep_runner.cpp
)
target_include_directories(lockstep_sweep PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(lockstep_sweep
  PUBLIC lockstep
  PRIVATE fmt::fmt yaml-cpp nlohmann_json::nlohmann_json)
lockstep_target_warnings(lockstep_sweep)
lockstep_unity_batches(lockstep_sweep)

target_sources(lockstep_cli PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/cli/cmd_sweep.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/cli/cmd_submit.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/cli/bench/sampler.cpp)
target_link_libraries(lockstep_cli PRIVATE lockstep_sweep)
