// lockstep/comm/comm_error.h — CommError lives in lockstep/common/comm_error.h, below the
// rendezvous store that raises it too; this header keeps the old path working.
#pragma once

#include "lockstep/common/comm_error.h"
