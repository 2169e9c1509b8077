# Sources of the data layer (owned by the data work): target_sources(lockstep PRIVATE ...)
# include()d from the top CMakeLists, so CMAKE_CURRENT_SOURCE_DIR is the project root.
target_sources(lockstep PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/sampler.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/names.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/char_dataset.cpp
)
# Image classification datasets (lockstep/data/image_dataset.h): IDX and CIFAR-10 here,
# image folders (the one file that compiles stb_image) in image_folder.cpp.
target_sources(lockstep PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/image_dataset.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/image_folder.cpp
)
