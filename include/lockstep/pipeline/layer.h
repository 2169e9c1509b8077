// lockstep/pipeline/layer.h — Layer lives in lockstep/nn/layer.h, below the layers
// that use it (ddp, pipeline, models); this header keeps older includes compiling.
#pragma once

#include "lockstep/nn/layer.h"
