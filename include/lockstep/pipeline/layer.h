// lockstep/pipeline/layer.h — forwards to lockstep/nn/layer.h, where Layer is declared
// below the layers that use it (ddp, pipeline, models).
#pragma once

#include "lockstep/nn/layer.h"
