# Sources of the models layer (image models): target_sources(lockstep PRIVATE ...)
# include()d from the top CMakeLists, so CMAKE_CURRENT_SOURCE_DIR is the project root.
target_sources(lockstep PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/models/vision.cpp)
