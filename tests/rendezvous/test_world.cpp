// Who-am-I from each of the four sources, their precedence, and the errors.
#include <gtest/gtest.h>

#include "lockstep/comm/nccl.h"
#include "lockstep/common/device.h"
#include "lockstep/common/error.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/rendezvous/placement.h"
#include "lockstep/rendezvous/world.h"
#include "support/expect.h"

namespace lockstep {
namespace {

using Vars = std::map<std::string, std::string>;

WorldInfo detect(std::map<std::string, std::string> vars) { return detectWorld(Environment(std::move(vars))); }

void expectConfigError(std::map<std::string, std::string> vars, const std::string& needle) {
  try {
    detect(std::move(vars));
    ADD_FAILURE() << "expected ConfigError containing: " << needle;
  } catch (const ConfigError& e) { EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what(); }
}

TEST(World, NothingSetIsASingleProcess) {
  auto w = detect({{"PATH", "/bin"}});
  EXPECT_EQ(w.source, WorldSource::kSingle);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.worldSize, 1);
  EXPECT_EQ(w.localWorldSize, 1);
}

TEST(World, LockstepLauncher) {
  auto w = detect({{"LOCKSTEP_RANK", "3"},
                   {"LOCKSTEP_WORLD_SIZE", "4"},
                   {"LOCKSTEP_LOCAL_RANK", "1"},
                   {"LOCKSTEP_LOCAL_WORLD_SIZE", "2"},
                   {"LOCKSTEP_NODE_RANK", "1"},
                   {"LOCKSTEP_MASTER_ADDR", "10.1.2.3"},
                   {"LOCKSTEP_MASTER_PORT", "29511"}});
  EXPECT_EQ(w.source, WorldSource::kLockstep);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.worldSize, 4);
  EXPECT_EQ(w.localRank, 1);
  EXPECT_EQ(w.localWorldSize, 2);
  EXPECT_EQ(w.nodeRank, 1);
  EXPECT_EQ(w.masterAddr, "10.1.2.3");
  EXPECT_EQ(w.masterPort, 29511);
}

TEST(World, LockstepWinsOverTorchrunAndMpi) {
  auto w = detect({{"LOCKSTEP_RANK", "0"},
                   {"LOCKSTEP_WORLD_SIZE", "1"},
                   {"RANK", "5"},
                   {"WORLD_SIZE", "8"},
                   {"OMPI_COMM_WORLD_RANK", "2"},
                   {"OMPI_COMM_WORLD_SIZE", "3"}});
  EXPECT_EQ(w.source, WorldSource::kLockstep);
  EXPECT_EQ(w.worldSize, 1);
}

TEST(World, Torchrun) {
  auto w = detect({{"RANK", "5"},
                   {"WORLD_SIZE", "8"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "node0"},
                   {"MASTER_PORT", "29500"},
                   {"GROUP_RANK", "1"},
                   {"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "1"}});
  EXPECT_EQ(w.source, WorldSource::kTorchrun);
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.worldSize, 8);
  EXPECT_EQ(w.localRank, 1);
  EXPECT_EQ(w.localWorldSize, 4);
  EXPECT_EQ(w.nodeRank, 1);
  EXPECT_EQ(w.masterAddr, "node0");
  EXPECT_EQ(w.masterPort, 29500);
}

TEST(World, OpenMpiOnOneNodeDerivesLoopbackAndAPortFromTheJob) {
  std::map<std::string, std::string> vars = {{"OMPI_COMM_WORLD_RANK", "1"},
                                             {"OMPI_COMM_WORLD_SIZE", "2"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                             {"OMPI_MCA_ess_base_jobid", "3546873857"}};
  auto w = detect(vars);
  EXPECT_EQ(w.source, WorldSource::kOpenMpi);
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.worldSize, 2);
  EXPECT_EQ(w.masterAddr, "127.0.0.1");
  EXPECT_GE(w.masterPort, 20000);
  EXPECT_LT(w.masterPort, 40000);
  vars["OMPI_COMM_WORLD_RANK"] = "0";
  EXPECT_EQ(detect(vars).masterPort, w.masterPort) << "every rank must derive the same port";
  vars["MASTER_PORT"] = "31000";
  EXPECT_EQ(detect(vars).masterPort, 31000);
}

TEST(World, OpenMpiAcrossNodesNeedsMasterAddr) {
  expectConfigError({{"OMPI_COMM_WORLD_RANK", "0"},
                     {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                    "MASTER_ADDR is not set; with world size 4 (OpenMPI)");
}

TEST(World, SlurmStep) {
  auto w = detect({{"SLURM_PROCID", "3"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_STEP_NUM_TASKS", "4"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_NODEID", "1"},
                   {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                   {"SLURM_STEP_NODELIST", "gpu[07-08]"},
                   {"SLURM_JOB_ID", "1234"},
                   {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(w.source, WorldSource::kSlurm);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.worldSize, 4);
  EXPECT_EQ(w.localRank, 1);
  EXPECT_EQ(w.localWorldSize, 2);
  EXPECT_EQ(w.nodeRank, 1);
  EXPECT_EQ(w.masterAddr, "gpu07");
  EXPECT_GE(w.masterPort, 20000);
}

TEST(World, SlurmHostListsAndTasksPerNode) {
  EXPECT_EQ(firstSlurmHost("node[03-05,7],gpu1"), "node03");
  EXPECT_EQ(firstSlurmHost("alpha,beta"), "alpha");
  EXPECT_EQ(firstSlurmHost("solo"), "solo");
  EXPECT_EQ(firstSlurmHost("rack1-[2,4]"), "rack1-2");
  EXPECT_EQ(slurmTasksOnNode("2(x3),1", 0), 2);
  EXPECT_EQ(slurmTasksOnNode("2(x3),1", 2), 2);
  EXPECT_EQ(slurmTasksOnNode("2(x3),1", 3), 1);
  EXPECT_THROW(slurmTasksOnNode("2(x3),1", 4), ConfigError);
  EXPECT_THROW(slurmTasksOnNode("x", 0), ConfigError);
}

TEST(World, InconsistentValuesAreClearErrors) {
  expectConfigError({{"LOCKSTEP_RANK", "2"},
                     {"LOCKSTEP_WORLD_SIZE", "2"},
                     {"LOCKSTEP_MASTER_PORT", "1"},
                     {"LOCKSTEP_MASTER_ADDR", "h"}},
                    "LOCKSTEP_RANK=2 must be smaller than LOCKSTEP_WORLD_SIZE=2");
  expectConfigError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
                    "MASTER_PORT is not set; with world size 2 (torchrun)");
  expectConfigError({{"RANK", "0"}}, "RANK is set but WORLD_SIZE is missing (torchrun)");
  expectConfigError({{"RANK", "zero"}, {"WORLD_SIZE", "2"}}, "RANK (from torchrun)='zero' is not an integer");
  expectConfigError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}},
                    "MASTER_PORT (torchrun)=99999 is out of range");
  expectConfigError({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE (from torchrun)=0 is out of range");
  expectConfigError({{"RANK", "1"},
                     {"WORLD_SIZE", "4"},
                     {"LOCAL_RANK", "3"},
                     {"LOCAL_WORLD_SIZE", "2"},
                     {"MASTER_ADDR", "h"},
                     {"MASTER_PORT", "5"}},
                    "LOCAL_RANK=3 must be smaller than LOCAL_WORLD_SIZE=2");
  expectConfigError({{"SLURM_PROCID", "0"}}, "SLURM_PROCID is set but SLURM_NTASKS is missing (Slurm)");
}

TEST(World, WorldOfOneNeedsNoMaster) {
  auto w = detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(w.worldSize, 1);
  EXPECT_EQ(w.masterPort, 0);
}

TEST(World, WorkerThreads) {
  EXPECT_EQ(workerThreads(Environment(Vars{{"LOCKSTEP_NUM_THREADS", "3"}, {"OMP_NUM_THREADS", "5"}}), 2), 3);
  EXPECT_EQ(workerThreads(Environment(Vars{{"OMP_NUM_THREADS", "5"}}), 2), 5);
  EXPECT_GE(workerThreads(Environment(Vars{}), 64), 1);
  EXPECT_THROW(workerThreads(Environment(Vars{{"LOCKSTEP_NUM_THREADS", "0"}}), 1), ConfigError);
}

TEST(Init, SingleProcessGetsAWorkingCommunicator) {
  auto ctx = init({}, Environment(Vars{{"LOCKSTEP_NUM_THREADS", "1"}}));
  EXPECT_EQ(ctx.world.worldSize, 1);
  EXPECT_EQ(ctx.comm->size(), 1);
  EXPECT_EQ(ctx.numThreads, 1);
  EXPECT_EQ(ctx.comm->backendName(), "gloo");
  EXPECT_EQ(ctx.comm->backend(), Backend::kGloo);
  EXPECT_EQ(ctx.placement.backend, Backend::kGloo);
  EXPECT_EQ(ctx.placement.device, visibleCudaDevices() > 0 ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU));
}

TEST(Init, BackendsAreAnEnum) {
  EXPECT_EQ(parseBackend("NCCL", "--backend"), Backend::kNccl);
  EXPECT_STREQ(toString(Backend::kMpi), "mpi");
  EXPECT_HAS(test::errorOf([] { parseBackend("tcp", "--backend"); }),
             "--backend 'tcp' is unknown; expected gloo, mpi or nccl");
}

TEST(Init, OnePlacementResolvesTheDeviceForEveryBackend) {
  const Placement cpu = resolvePlacement(DeviceChoice::kCpu, Backend::kGloo, 1);
  EXPECT_EQ(cpu.device, c10::Device(c10::kCPU));
  EXPECT_FALSE(cpu.stagesThroughHost());
  EXPECT_TRUE((Placement{c10::Device(c10::kCUDA, 0), Backend::kGloo}).stagesThroughHost());
  // NCCL moves the worker's own GPU's memory, whatever the machine this test runs on.
  const Placement nccl = resolvePlacement(DeviceChoice::kAuto, Backend::kNccl, 1);
  EXPECT_EQ(nccl.device, c10::Device(c10::kCUDA, 1));
  EXPECT_FALSE(nccl.stagesThroughHost());
  EXPECT_HAS(test::errorOf([] { resolvePlacement(DeviceChoice::kCpu, Backend::kNccl, 0); }),
             "device cpu over the nccl backend");
  if (visibleCudaDevices() > 0) {
    EXPECT_TRUE(resolvePlacement(DeviceChoice::kCuda, Backend::kMpi, 0).stagesThroughHost());
  } else {
    EXPECT_HAS(test::errorOf([] { resolvePlacement(DeviceChoice::kCuda, Backend::kGloo, 0, "trainer.device"); }),
               "trainer.device");
    EXPECT_EQ(resolvePlacement(DeviceChoice::kAuto, Backend::kMpi, 0).device, c10::Device(c10::kCPU));
  }
}

TEST(Init, UnknownBackendIsRejected) {
  try {
    init({}, Environment(Vars{{"LOCKSTEP_BACKEND", "carrier-pigeon"}}));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "LOCKSTEP_BACKEND='carrier-pigeon': unknown backend; expected gloo, mpi, nccl or auto"),
              std::string::npos)
        << e.what();
  }
}

// The launcher writes its workers' variables with environmentFor(); detectWorld
// must read back exactly what was written, in every form it understands.
TEST(World, EnvironmentForRoundTripsThroughDetectWorldInEveryForm) {
  for (WorldSource form :
       {WorldSource::kLockstep, WorldSource::kTorchrun, WorldSource::kOpenMpi, WorldSource::kSlurm}) {
    SCOPED_TRACE(toString(form));
    for (int rank : {0, 5, 7}) {
      WorldInfo w;
      w.rank = rank;
      w.worldSize = 8;
      w.localRank = rank % 4;
      w.localWorldSize = 4;
      w.nodeRank = rank / 4;
      w.masterAddr = "10.1.2.3";
      w.masterPort = 29511;
      w.source = form;
      WorldInfo back = detectWorld(Environment(environmentFor(w, form)));
      EXPECT_EQ(back.source, form);
      EXPECT_EQ(back.rank, w.rank);
      EXPECT_EQ(back.worldSize, w.worldSize);
      EXPECT_EQ(back.localRank, w.localRank);
      EXPECT_EQ(back.localWorldSize, w.localWorldSize);
      EXPECT_EQ(back.nodeRank, w.nodeRank);
      EXPECT_EQ(back.masterAddr, w.masterAddr);
      EXPECT_EQ(back.masterPort, w.masterPort);
    }
  }
  // One node: every form still carries the whole world.
  WorldInfo single;
  single.rank = 1;
  single.worldSize = 2;
  single.localRank = 1;
  single.localWorldSize = 2;
  single.masterPort = 1234;
  EXPECT_EQ(detectWorld(Environment(environmentFor(single, WorldSource::kSlurm))).localWorldSize, 2);
}

TEST(Init, AutoPicksMpiOnlyForWorkersStartedByMpirun) {
  Vars mpirun{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "42"}};
  Vars ours{{"LOCKSTEP_RANK", "0"},
            {"LOCKSTEP_WORLD_SIZE", "2"},
            {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
            {"LOCKSTEP_MASTER_PORT", "29500"}};
  Environment envMpirun(mpirun);
  Environment envOurs(ours);
  // A GPU per worker comes first: NCCL (never on a machine without one).
  const bool gpus = visibleCudaDevices() > 0;
  EXPECT_EQ(chooseBackend("auto", detectWorld(envMpirun), "LOCKSTEP_BACKEND", envMpirun), gpus                ? "nccl"
                                                                                          : mpiBackendBuilt() ? "mpi"
                                                                                                              : "gloo");
  EXPECT_EQ(chooseBackend("auto", detectWorld(envOurs), "LOCKSTEP_BACKEND", envOurs), gpus ? "nccl" : "gloo");
  EXPECT_EQ(chooseBackend("gloo", detectWorld(envMpirun), "LOCKSTEP_BACKEND", envMpirun), "gloo");
  // A GPU per worker: NCCL, unless the workers are to train on the CPU.
  using detail::autoBackend;
  EXPECT_EQ(autoBackend(detectWorld(envOurs), DeviceChoice::kAuto, 2, true, true), "nccl");
  EXPECT_EQ(autoBackend(detectWorld(envOurs), DeviceChoice::kCpu, 2, true, true), "gloo");
  EXPECT_EQ(autoBackend(detectWorld(envMpirun), DeviceChoice::kCpu, 2, true, true), "mpi");
  EXPECT_EQ(autoBackend(detectWorld(envOurs), DeviceChoice::kAuto, 0, true, true), "gloo") << "no GPU";
  EXPECT_EQ(autoBackend(detectWorld(envOurs), DeviceChoice::kAuto, 2, false, true), "gloo") << "no NCCL";
  EXPECT_EQ(chooseBackend("auto", WorldInfo{}, "LOCKSTEP_BACKEND", Environment(Vars{})), "gloo");
}

TEST(Init, NcclBackendNeedsAGpuPerWorker) {
  // The rule for every count of visible GPUs, whatever this machine has.
  Vars vars{{"LOCKSTEP_RANK", "1"},
            {"LOCKSTEP_WORLD_SIZE", "2"},
            {"LOCKSTEP_LOCAL_RANK", "0"},
            {"LOCKSTEP_LOCAL_WORLD_SIZE", "2"},
            {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
            {"LOCKSTEP_MASTER_PORT", "29500"}};
  const WorldInfo twoLocal = detectWorld(Environment(vars));
  using detail::ncclMisfit;
  EXPECT_EQ(ncclMisfit(twoLocal, 2, true, "LOCKSTEP_BACKEND"), std::nullopt) << "a GPU per worker fits";
  EXPECT_EQ(ncclMisfit(twoLocal, 8, true, "LOCKSTEP_BACKEND"), std::nullopt);
  EXPECT_HAS(ncclMisfit(twoLocal, 0, true, "LOCKSTEP_BACKEND").value_or(""),
             "LOCKSTEP_BACKEND=nccl: no CUDA device is visible to rank 1 (CUDA_VISIBLE_DEVICES is");
  EXPECT_HAS(ncclMisfit(twoLocal, 1, true, "--backend").value_or(""),
             "--backend=nccl: 2 workers on this node share 1 GPU(s), and NCCL cannot put two ranks on one GPU");
  EXPECT_HAS(ncclMisfit(twoLocal, 2, false, "LOCKSTEP_BACKEND").value_or(""), "built against a LibTorch without NCCL");
  // And chooseBackend applies it with this machine's GPUs and build.
  const int visible = visibleCudaDevices();
  vars["LOCKSTEP_LOCAL_WORLD_SIZE"] = std::to_string(std::max(1, visible));
  Environment env(vars);
  const auto expected = ncclMisfit(detectWorld(env), visible, ncclBackendBuilt(), "LOCKSTEP_BACKEND");
  if (expected) {
    EXPECT_EQ(test::errorOf([&] { chooseBackend("nccl", detectWorld(env), "LOCKSTEP_BACKEND", env); }), *expected);
  } else {
    EXPECT_EQ(chooseBackend("nccl", detectWorld(env), "LOCKSTEP_BACKEND", env), "nccl");
  }
}

TEST(Init, MpiBackendNeedsMpirunWorkers) {
  LOCKSTEP_SKIP_UNLESS(mpiBackendBuilt(), "the MPI backend (lockstep built with libopenmpi-dev)");
  Vars ours{{"LOCKSTEP_RANK", "1"},
            {"LOCKSTEP_WORLD_SIZE", "2"},
            {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
            {"LOCKSTEP_MASTER_PORT", "29500"}};
  Environment env(ours);
  try {
    chooseBackend("mpi", detectWorld(env), "LOCKSTEP_BACKEND", env);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_BACKEND=mpi needs workers started by mpirun"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep
