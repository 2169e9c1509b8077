# Tests of the data layer: lockstep_add_test(...) calls.
