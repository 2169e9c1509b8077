#include "lockstep/data/loader.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/worker_thread.h"
#include "lockstep/common/error.h"

namespace lockstep {

TensorDataset::TensorDataset(at::Tensor inputs, at::Tensor targets)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  LOCKSTEP_CHECK(inputs_.defined() && targets_.defined(), "TensorDataset needs inputs and targets");
  LOCKSTEP_CHECK_EQ(inputs_.size(0), targets_.size(0), "inputs and targets must have the same number of rows");
}

int64_t TensorDataset::size() const { return inputs_.size(0); }

Batch TensorDataset::batch(const std::vector<int64_t>& indices, int64_t) const {
  at::Tensor index = at::tensor(indices, at::kLong);
  return {inputs_.index_select(0, index), targets_.index_select(0, index)};
}

Batch onDevice(Batch batch, c10::Device device) {
  if (device.is_cpu()) return batch;
  for (at::Tensor* t : {&batch.inputs, &batch.targets}) {
    if (t->defined() && t->device() != device) *t = t->pin_memory().to(device, /*non_blocking=*/true);
  }
  return batch;
}

struct DataLoader::State {
  const Dataset* dataset = nullptr;
  LoaderOptions options;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::vector<int64_t>> plan;
  int64_t epoch = 0;
  uint64_t generation = 0;
  size_t nextToClaim = 0;
  size_t nextToServe = 0;
  std::map<size_t, Batch> ready;
  std::map<size_t, std::exception_ptr> failed;
  bool stop = false;
  double waitSeconds = 0;
  int64_t served = 0;
  std::vector<std::thread> workers;

  void work() {
    c10::GradMode::set_enabled(false);
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      cv.wait(lock, [&] {
        return stop || (nextToClaim < plan.size() && nextToClaim < nextToServe + static_cast<size_t>(options.prefetch));
      });
      if (stop) return;
      size_t mine = nextToClaim++;
      uint64_t gen = generation;
      std::vector<int64_t> indices = plan[mine];
      int64_t e = epoch;
      lock.unlock();
      Batch batch;
      std::exception_ptr error;
      try {
        batch = onDevice(dataset->batch(indices, e), options.device);
      } catch (...) { error = std::current_exception(); }
      lock.lock();
      if (gen != generation) continue;  // a new plan replaced this one
      if (error)
        failed[mine] = error;
      else
        ready[mine] = std::move(batch);
      cv.notify_all();
    }
  }
};

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options) : state_(std::make_shared<State>()) {
  LOCKSTEP_CHECK(options.numWorkers >= 0, "data.num_workers must not be negative, got ", options.numWorkers);
  LOCKSTEP_CHECK(options.prefetch >= 1, "data.prefetch must be at least 1, got ", options.prefetch);
  state_->dataset = &dataset;
  state_->options = options;
  for (int i = 0; i < options.numWorkers; ++i) {
    state_->workers.push_back(detail::startThreadOn(options.device, [s = state_.get()] { s->work(); }));
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->cv.notify_all();
  for (auto& t : state_->workers) t.join();
}

void DataLoader::start(std::vector<std::vector<int64_t>> plan, int64_t epoch) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->plan = std::move(plan);
  state_->epoch = epoch;
  ++state_->generation;
  state_->nextToClaim = 0;
  state_->nextToServe = 0;
  state_->ready.clear();
  state_->failed.clear();
  state_->cv.notify_all();
}

Batch DataLoader::next() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.nextToServe >= s.plan.size()) {
    throw Error(fmt::format("DataLoader::next() past the end of the plan ({} batches)", s.plan.size()));
  }
  size_t want = s.nextToServe;
  if (s.options.numWorkers == 0) {
    std::vector<int64_t> indices = s.plan[want];
    int64_t epoch = s.epoch;
    ++s.nextToServe;
    ++s.served;
    lock.unlock();
    return onDevice(s.dataset->batch(indices, epoch), s.options.device);
  }
  auto start = std::chrono::steady_clock::now();
  s.cv.wait(lock, [&] { return s.ready.count(want) || s.failed.count(want); });
  s.waitSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (auto it = s.failed.find(want); it != s.failed.end()) {
    auto error = it->second;
    s.failed.erase(it);
    ++s.nextToServe;
    s.cv.notify_all();
    std::rethrow_exception(error);
  }
  Batch batch = std::move(s.ready[want]);
  s.ready.erase(want);
  ++s.nextToServe;
  ++s.served;
  s.cv.notify_all();
  return batch;
}

double DataLoader::waitSeconds() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->waitSeconds;
}

int64_t DataLoader::batchesServed() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->served;
}

}  // namespace lockstep
