# Tests of the models layer: lockstep_add_test(...) calls (paths relative to tests/).
lockstep_add_test(NAME test_vision_models SOURCES models/test_vision_models.cpp LABELS unit)
lockstep_add_test(NAME test_model_checkpointing SOURCES models/test_model_checkpointing.cpp LABELS unit TIMEOUT 300)
