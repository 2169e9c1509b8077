// lockstep/train/config.h — `lockstep train CONFIG.yaml [key=value ...]`.
//
// A YAML file of sections (model, data, trainer, optimizer, lr_scaling,
// strategy, schedule, parallel, ps, ddp, checkpoint, generate, monitor,
// testing) and the keys precision and device, all listed, with their defaults,
// in docs/training.md. Any key may be overridden on the command line with its
// dotted path (trainer.batch_size=256, data.sources=[faker-pets,wamerican]).
// Unknown keys and values of the wrong type are ConfigErrors naming the
// file (or "command line") and the key's path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/train/fault_injection.h"
#include "lockstep/train/trainer.h"

namespace lockstep {

struct TrainConfig {
  struct Model {
    std::string type = "charlstm";
    int64_t hidden = 128;
    int64_t layers = 4;
    int64_t window = 16;
    std::vector<int64_t> hiddenSizes = {512, 256};  ///< model.type mlp: hidden layer widths
    int64_t checkpointSegments = 0;                 ///< activation checkpointing (every model); 0: off
  } model;
  struct Data {
    std::string dataset = "names";  ///< names, fashion-mnist, mnist, cifar10, imagefolder
    std::vector<std::string> sources = {"faker"};
    std::string csvColumn = "Animal's Name";
    double validationFraction = 0.05;
    std::string root;                 ///< image datasets; empty: the dataset's default location
    int64_t imageSize = 0;            ///< imagefolder: resize to this square size (0: keep)
    int64_t channels = 3;             ///< imagefolder: 1 or 3
    std::string badImages = "abort";  ///< imagefolder: abort or skip unreadable images
    bool randomFlip = false;          ///< augmentation: random horizontal flip
    int64_t cropPadding = 0;          ///< augmentation: random crop after zero padding
    std::vector<double> mean;         ///< normalisation per channel; empty: the dataset's usual values
    std::vector<double> std;
  } data;
  /// trainer.*, optimizer.*, lr_scaling.*, strategy.type, schedule.type,
  /// precision, device, parallel.*, ps.*, ddp.*, checkpoint.* and
  /// data.num_workers/prefetch (the loader): the Trainer's own options, so
  /// every default is the one TrainerOptions states. An empty checkpoint.dir
  /// is resolved by `lockstep train` to runs/<config file stem>/checkpoints.
  TrainerOptions trainer;
  struct Generate {
    int64_t samples = 20;  ///< names printed after training (0: none)
    double temperature = 0.8;
  } generate;
  struct Monitor {
    std::string dir;                ///< run directory (docs/monitoring.md); empty: runs/<config file stem>; off: none
    double systemInterval = 1.0;    ///< seconds between CPU/memory samples per worker; 0: none
    int64_t traceSteps = 50;        ///< steps in the Chrome trace per worker; 0: none; -1: all
    std::string progress = "auto";  ///< auto, bar, lines, off
    double progressInterval = 10;   ///< seconds between plain progress lines
  } monitor;
  /// testing.slow_rank, testing.slow_factor, testing.inf_gradient_step, testing.inf_gradient_rank
  /// (fault_injection.h; crashAfterStep comes from the
  /// environment, LOCKSTEP_FAULT_CRASH_AFTER_STEP).
  FaultInjection testing;
};

/// Defaults, then `file` (may be empty: defaults only), then `overrides` ("a.b=value").
TrainConfig loadTrainConfig(const std::string& file, const std::vector<std::string>& overrides);
/// The resolved configuration as YAML (logged at start and stored in checkpoints).
std::string toYaml(const TrainConfig& config);
/// Every key's dotted path, in order (docs, error hints).
std::vector<std::string> trainConfigKeys();

}  // namespace lockstep
