# Tests of the monitor layer: lockstep_add_test(...) calls (paths relative to tests/).
# Synthetic callback records in, files read back; test_monitor_fit drives a real Trainer
# and measures the callbacks' cost per step (docs/monitoring.md).
foreach(name tensorboard metrics_writer step_timeline system_stats progress fit)
  lockstep_add_test(NAME test_monitor_${name} SOURCES monitor/test_${name}.cpp LABELS unit TIMEOUT 120)
  target_link_libraries(test_monitor_${name} PRIVATE nlohmann_json::nlohmann_json)
endforeach()

# PyPI's TensorBoard (in the environment scripts/setup.sh made) reads the event file of a real run.
add_test(NAME test_tensorboard_reader
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/tensorboard_reader.sh $<TARGET_FILE:lockstep_cli> ${LOCKSTEP_VENV}/bin/python3
          ${PROJECT_SOURCE_DIR})
set_tests_properties(test_tensorboard_reader PROPERTIES LABELS "multiprocess" TIMEOUT 300)

# A libnvidia-ml.so.1 with scripted answers (tests/helpers/fake_nvml.cpp): the GPU probe's real path
# runs without a GPU, found through LOCKSTEP_NVML_LIBRARY or, as the driver's, on the loader's path.
add_library(fake_nvml SHARED ${CMAKE_CURRENT_LIST_DIR}/../helpers/fake_nvml.cpp)
set_target_properties(fake_nvml PROPERTIES OUTPUT_NAME nvidia-ml SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_nvml)
lockstep_add_test(NAME test_fake_nvml SOURCES monitor/test_fake_nvml.cpp LABELS unit TIMEOUT 60)
add_dependencies(test_fake_nvml fake_nvml)
foreach(name test_fake_nvml test_monitor_system_stats)
  target_compile_definitions(${name} PRIVATE LOCKSTEP_FAKE_NVML="$<TARGET_SONAME_FILE:fake_nvml>")
endforeach()
add_dependencies(test_monitor_system_stats fake_nvml)
# The same through whole runs: 2 workers, their files, TensorBoard and traces (fake_nvml_run.sh).
add_test(NAME test_fake_nvml_run
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/fake_nvml_run.sh $<TARGET_FILE:lockstep_cli> ${LOCKSTEP_VENV}/bin/python3
          ${PROJECT_SOURCE_DIR} $<TARGET_FILE_DIR:fake_nvml>)
set_tests_properties(test_fake_nvml_run PROPERTIES LABELS "multiprocess" TIMEOUT 300)
