# The workloads' models (CharLstm, Mlp, image classifiers): target_sources(lockstep_workloads PRIVATE ...).
# include()d from the top CMakeLists, so CMAKE_CURRENT_SOURCE_DIR is the project root.
target_sources(lockstep_workloads PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/char_lstm.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/vision.cpp
)
