// lockstep/comm/store.h — forwards to lockstep/comm/store/store.h, where the Store is declared.
#pragma once

#include "lockstep/comm/store/store.h"
