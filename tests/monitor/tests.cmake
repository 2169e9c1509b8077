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
