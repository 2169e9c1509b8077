// lockstep/lockstep.h — the umbrella header: everything a training program needs.
#pragma once

#include "lockstep/comm/communicator.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/rendezvous/world.h"
