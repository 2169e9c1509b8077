# Sources of the monitor layer (run directory files, system samples, timeline,
# progress): target_sources(lockstep PRIVATE ...). include()d from the top
# CMakeLists, so CMAKE_CURRENT_SOURCE_DIR is the project root.
target_sources(lockstep PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/run_files.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/tensorboard.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/metrics_writer.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/step_timeline.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/system_stats.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/gpu_probe.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/progress.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/monitor/monitor.cpp
)
# JSON lines and run.json are written with nlohmann-json (header only).
target_link_libraries(lockstep PRIVATE nlohmann_json::nlohmann_json)

# GPU utilisation and memory in system/rank<R>.jsonl: the probe declares the
# part of NVML's C interface it uses (monitor/nvml_abi.h) and dlopen()s the
# driver's libnvidia-ml.so.1 at run time, so it is built everywhere and the
# library still loads on machines without an NVIDIA driver.
target_link_libraries(lockstep PRIVATE ${CMAKE_DL_LIBS})
