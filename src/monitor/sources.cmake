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

# GPU utilisation and memory in system/rank<R>.jsonl: only where nvml.h is
# installed (CUDA toolkit or Debian's libnvidia-ml-dev). The driver's
# libnvidia-ml.so.1 is dlopen()ed at run time, not linked, so the library
# still loads on machines without an NVIDIA driver. Absent here: not an error.
find_path(LOCKSTEP_NVML_INCLUDE_DIR nvml.h
  PATHS /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include)
if(LOCKSTEP_NVML_INCLUDE_DIR)
  message(STATUS "lockstep: NVML header found in ${LOCKSTEP_NVML_INCLUDE_DIR}: GPU fields in system samples")
  target_compile_definitions(lockstep PRIVATE LOCKSTEP_HAVE_NVML)
  target_include_directories(lockstep SYSTEM PRIVATE ${LOCKSTEP_NVML_INCLUDE_DIR})
  target_link_libraries(lockstep PRIVATE ${CMAKE_DL_LIBS})
endif()
