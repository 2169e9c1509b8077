# Sources of the data layer (owned by the data work): target_sources(lockstep PRIVATE ...)
