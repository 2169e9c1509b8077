// lockstep/comm/store.h — kept so programs that include it still compile; the store is in comm/store/.
#pragma once

#include "lockstep/comm/store/store.h"
