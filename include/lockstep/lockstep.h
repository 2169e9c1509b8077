// lockstep/lockstep.h — the umbrella header: everything a training program needs.
//
// The communicator and the environment (init(), the world), data-parallel
// training in a loop of your own (DistributedDataParallel, the sampler, the
// loader), and the Trainer with its options, optimizers, strategies, tasks,
// callbacks and checkpoints. The demo workloads (pet names, image datasets,
// vision models) are not part of the installed library.
#pragma once

#include "lockstep/comm/backend.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/sampler.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/optim/lr_scaling.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/rendezvous/world.h"
#include "lockstep/train/callbacks.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/config.h"
#include "lockstep/train/strategy.h"
#include "lockstep/train/task.h"
#include "lockstep/train/trainer.h"
