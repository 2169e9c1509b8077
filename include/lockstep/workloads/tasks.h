// lockstep/workloads/tasks.h — the workloads lockstep ships: the pet-name
// generator (a character LSTM over names) and image classifiers (Fashion-MNIST,
// MNIST, CIFAR-10, image folders). They live in the lockstep_workloads
// library, which the CLI links; the core library does not depend on them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/data/char_dataset.h"
#include "lockstep/data/image_dataset.h"
#include "lockstep/data/image_transforms.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/train/task.h"

namespace lockstep {

/// Registers "names" (charlstm) and "fashion-mnist", "mnist", "cifar10", "imagefolder" (image models).
void addBuiltinTasks(TaskRegistry& tasks);

/// The train and test (or val) image sets a config's data section names; test may be null.
std::pair<std::shared_ptr<ImageDataset>, std::shared_ptr<ImageDataset>> openImageSets(const TrainConfig::Data& data);
/// Normalisation (the dataset's usual values unless configured) and, for training, augmentation.
ImageTransformOptions transformsFor(const TrainConfig& config, bool train);

/// `count` names sampled from a pet-name model, capitalised.
std::vector<std::string> sampleNames(CharLstmImpl& model, const CharVocab& vocab, int64_t window, int64_t count,
                                     double temperature, int64_t maxLength, uint64_t seed);

}  // namespace lockstep
