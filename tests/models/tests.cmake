# Tests of the models layer: lockstep_add_test(...) calls (paths relative to tests/).
