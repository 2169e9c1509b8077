# The workloads' models (CharLstm, Mlp, image classifiers: one file per family, makeImageModel in
# vision.cpp): target_sources(lockstep_workloads PRIVATE ...).
# include()d from the top CMakeLists, so CMAKE_CURRENT_SOURCE_DIR is the project root.
target_sources(lockstep_workloads PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/alexnet.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/char_lstm.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/convnet.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/image_mlp.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/resnet.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/vision.cpp
)
