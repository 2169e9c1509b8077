# Tests of the data layer: lockstep_add_test(...) calls.
# test_names and test_char_dataset read the real name sources that
# scripts/setup.sh (scripts/setup_data.sh) installs, and fail when they are missing.
lockstep_add_test(NAME test_sampler SOURCES data/test_sampler.cpp LABELS unit)
lockstep_add_test(NAME test_global_batches SOURCES data/test_global_batches.cpp LABELS unit)
lockstep_add_test(NAME test_names SOURCES data/test_names.cpp LABELS unit)
lockstep_add_test(NAME test_char_dataset SOURCES data/test_char_dataset.cpp LABELS unit)
# test_image_datasets reads the real Fashion-MNIST (Debian's dataset-fashion-mnist, installed by
# scripts/setup.sh) and fails when it is missing; it writes its gzip IDX files with zlib itself.
lockstep_add_test(NAME test_image_datasets SOURCES data/test_image_datasets.cpp data/test_image_folder.cpp LABELS unit)
target_link_libraries(test_image_datasets PRIVATE ZLIB::ZLIB)
