// lockstep/comm/comm_error.h — forwards to lockstep/common/comm_error.h, where CommError is
// declared below the rendezvous store that raises it too.
#pragma once

#include "lockstep/common/comm_error.h"
