// lockstep/train/config.h — `lockstep train CONFIG.yaml [key=value ...]`.
//
// A YAML file of sections (model, data, trainer, optimizer, lr_scaling, ddp,
// checkpoint, generate, monitor) whose keys are listed, with their defaults, in
// docs/training.md. Any key may be overridden on the command line with its
// dotted path (trainer.batch_size=256, data.sources=[dog-names,cat-names]).
// Unknown keys and values of the wrong type are ConfigErrors naming the
// file (or "command line") and the key's path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

struct TrainConfig {
  struct Model {
    std::string type = "charlstm";
    int64_t hidden = 128;
    int64_t layers = 4;
    int64_t window = 16;
    std::vector<int64_t> hiddenSizes = {512, 256};  ///< model.type mlp: hidden layer widths
  } model;
  struct Data {
    std::string dataset = "names";  ///< names, fashion-mnist, mnist, cifar10, imagefolder
    std::vector<std::string> sources = {"dog-names", "cat-names", "faker-pets", "faker"};
    std::string csvColumn = "Animal's Name";
    double validationFraction = 0.05;
    std::string root;               ///< image datasets; empty: the dataset's default location
    int64_t imageSize = 0;          ///< imagefolder: resize to this square size (0: keep)
    int64_t channels = 3;           ///< imagefolder: 1 or 3
    std::string badImages = "abort";  ///< imagefolder: abort or skip unreadable images
    int64_t numWorkers = 2;         ///< loader threads (0: load in the training thread)
    int64_t prefetch = 4;           ///< batches prepared ahead
    bool randomFlip = false;        ///< augmentation: random horizontal flip
    int64_t cropPadding = 0;        ///< augmentation: random crop after zero padding
    std::vector<double> mean;       ///< normalisation per channel; empty: the dataset's usual values
    std::vector<double> std;
  } data;
  struct Trainer {
    int64_t epochs = 1;
    int64_t maxSteps = 0;   ///< 0: run `epochs` epochs; > 0: stop after this many optimizer steps
    int64_t batchSize = 1024;  ///< per worker and micro-batch
    int64_t accumulation = 1;  ///< micro-batches per optimizer step
    double clipGradNorm = 0;   ///< 0: no clipping
    int64_t seed = 0;
    int64_t logEvery = 50;     ///< optimizer steps between progress lines
    bool validate = true;      ///< validation loss at the end of every epoch
  } trainer;
  struct Optimizer {
    std::string type = "adam";  ///< sgd, adam, adamw
    double lr = 1e-3;
    double momentum = 0.0;      ///< sgd
    double weightDecay = 0.0;
    double beta1 = 0.9;
    double beta2 = 0.999;
  } optimizer;
  struct LrScaling {
    std::string rule = "linear";  ///< none, linear, sqrt, pow2/3
    int64_t baseBatch = 0;        ///< 0: the per-worker batch
    int64_t warmupSteps = 0;
  } lrScaling;
  struct Ddp {
    double bucketCapMb = 25;
    double firstBucketCapMb = 1;
    bool findUnusedParameters = false;
    bool broadcastBuffers = true;  ///< keep BatchNorm statistics equal on every rank
    std::string compression = "none";  ///< none, fp16, bf16
  } ddp;
  struct Checkpoint {
    std::string dir = "runs/petnames/checkpoints";
    int64_t every = 0;       ///< optimizer steps between checkpoints; 0: at the end of each epoch
    int64_t keepLast = 3;
    std::string resume = "auto";  ///< auto (newest valid in dir), none, or a checkpoint file
  } checkpoint;
  struct Generate {
    int64_t samples = 20;   ///< names printed after training (0: none)
    double temperature = 0.8;
  } generate;
  struct Monitor {
    std::string dir;              ///< run directory (docs/monitoring.md); empty: runs/<config file stem>; off: none
    double systemInterval = 1.0;  ///< seconds between CPU/memory samples per worker; 0: none
    int64_t traceSteps = 50;      ///< steps in the Chrome trace per worker; 0: none; -1: all
    std::string progress = "auto";  ///< auto, bar, lines, off
    double progressInterval = 10;   ///< seconds between plain progress lines
  } monitor;
};

/// Defaults, then `file` (may be empty: defaults only), then `overrides` ("a.b=value").
TrainConfig loadTrainConfig(const std::string& file, const std::vector<std::string>& overrides);
/// The resolved configuration as YAML (logged at start and stored in checkpoints).
std::string toYaml(const TrainConfig& config);
/// Every key's dotted path, in order (docs, error hints).
std::vector<std::string> trainConfigKeys();

}  // namespace lockstep
