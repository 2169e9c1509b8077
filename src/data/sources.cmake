# The workloads' datasets (names, character windows, image formats):
# target_sources(lockstep_workloads PRIVATE ...). The core's data parts (sampler,
# loader, TensorDataset) are in the lockstep target. include()d from the top
# CMakeLists, so CMAKE_CURRENT_SOURCE_DIR is the project root.
target_sources(lockstep_workloads PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/names.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/char_dataset.cpp
)
# Image classification datasets (lockstep/data/image_dataset.h): IDX and CIFAR-10 here,
# image folders (the one file that compiles stb_image) in image_folder.cpp.
target_sources(lockstep_workloads PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/image_dataset.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/image_folder.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/image_transforms.cpp
)
