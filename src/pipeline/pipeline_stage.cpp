// A pipeline stage at work: micro-batches through this stage's layers in the schedule's order,
// activations to the next stage and their gradients back by send/recv.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "lockstep/common/error.h"
#include "lockstep/common/tensor_memory.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/pipeline/pipeline.h"

namespace lockstep {

namespace {

using Clock = std::chrono::steady_clock;

// Tags keep the three kinds of message apart between a pair of neighbours.
constexpr int kHeaderTag = 71;
constexpr int kActivationTag = 72;
constexpr int kGradientTag = 73;
constexpr int64_t kHeaderSize = 10;  // dtype, rank, up to 8 sizes

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int64_t layerElements(const Layer& layer) {
  std::set<const void*> seen;
  int64_t n = 0;
  for (const auto& m : layer.modules) {
    for (const auto& p : m->parameters()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
    }
  }
  return n;
}

std::vector<int64_t> shapeKey(const at::Tensor& t) {
  std::vector<int64_t> key(t.sizes().begin(), t.sizes().end());
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  return key;
}

}  // namespace

struct PipelineStage::Micro {
  std::vector<int64_t> key;  // the micro-batch's input shape: names the activation shapes of every stage
  at::Tensor input;          // received activation (stages after the first), requires grad
  at::Tensor output;         // this stage's output, or on the last stage the weighted loss
  // The activation's receive, posted one forward ahead so its bytes move while this stage computes.
  // (Only one ahead: a communicator completes point-to-point operations in the order they were
  // posted, so a receive posted long before it is needed would hold up the ones behind it.)
  WorkHandle inputRecv;
};

PipelineStage::PipelineStage(std::vector<Layer> layers, std::shared_ptr<Communicator> comm, PipelineOptions options)
    : layers_(std::move(layers)), comm_(std::move(comm)), options_(std::move(options)) {
  LOCKSTEP_CHECK(comm_ != nullptr, "PipelineStage needs a communicator (the pipeline group)");
  if (comm_->size() != options_.stages) {
    throw ConfigError(
        fmt::format("parallel.pipeline is {}, but the pipeline group has {} rank(s)", options_.stages, comm_->size()));
  }
  checkPipelineOptions(options_, static_cast<int64_t>(layers_.size()), comm_->size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    LOCKSTEP_CHECK(layers_[l].forward != nullptr, "pipeline layer ", l, " (", layers_[l].name, ") has no forward");
    for (const auto& m : layers_[l].modules) {
      LOCKSTEP_CHECK(m != nullptr, "pipeline layer ", l, " (", layers_[l].name, ") lists a null module");
    }
  }
  stage_ = comm_->rank();
  if (options_.balance.empty()) {
    std::vector<int64_t> elements;
    for (const auto& layer : layers_) elements.push_back(layerElements(layer));
    balance_ = balanceByParameters(elements, stages());
  } else {
    balance_ = options_.balance;
  }
  for (int s = 0; s < stage_; ++s) first_ += balance_[static_cast<size_t>(s)];
  end_ = first_ + balance_[static_cast<size_t>(stage_)];
  std::map<const torch::nn::Module*, int64_t> ownerLayer;
  for (int64_t l = 0; l < static_cast<int64_t>(layers_.size()); ++l) {
    for (const auto& m : layers_[static_cast<size_t>(l)].modules) {
      auto [it, added] = ownerLayer.emplace(m.get(), l);
      const bool mine = l >= first_ && l < end_;
      const bool ownerMine = it->second >= first_ && it->second < end_;
      if (!added && mine != ownerMine) {
        throw ConfigError(fmt::format(
            "pipeline layers {} ({}) and {} ({}) share a module but fall into different stages; change "
            "parallel.balance",
            it->second, layers_[static_cast<size_t>(it->second)].name, l, layers_[static_cast<size_t>(l)].name));
      }
      if (added && mine) modules_.push_back(m);
    }
  }
  for (const auto& m : modules_) m->to(options_.device);  // this stage's layers only
}

PipelineStage::~PipelineStage() {
  for (auto& w : pendingSends_) {
    try {
      w->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the communicator reports its own failure
    }
  }
}

std::vector<at::Tensor> PipelineStage::parameters() const {
  std::vector<at::Tensor> out;
  std::set<const void*> seen;
  for (const auto& m : modules_) {
    for (const auto& p : m->parameters()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
    }
  }
  return out;
}

int64_t PipelineStage::gradientBytes() const {
  int64_t bytes = 0;
  for (const auto& p : parameters()) {
    if (p.grad().defined()) bytes += static_cast<int64_t>(p.grad().nbytes());
  }
  return bytes;
}

at::Tensor PipelineStage::runLayers(const at::Tensor& x) const {
  at::Tensor y = x;
  for (int64_t l = first_; l < end_; ++l) y = layers_[static_cast<size_t>(l)].forward(y);
  return y;
}

std::vector<Batch> PipelineStage::split(const Batch& batch, bool fewerIfSmall) const {
  LOCKSTEP_CHECK(batch.inputs.defined() && batch.inputs.dim() >= 1, "PipelineStage: the batch has no inputs");
  const int64_t rows = batch.inputs.size(0);
  const int m =
      fewerIfSmall ? static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, microbatches()))) : microbatches();
  if (rows < m) {
    throw Error(
        fmt::format("a batch of {} row(s) cannot be split into {} micro-batches (parallel.microbatches); "
                    "raise the batch size or lower parallel.microbatches",
                    rows, m));
  }
  std::vector<at::Tensor> inputs = at::tensor_split(batch.inputs, m);
  std::vector<at::Tensor> targets;
  if (batch.targets.defined()) targets = at::tensor_split(batch.targets, m);
  std::vector<Batch> parts(static_cast<size_t>(m));
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].inputs = inputs[i];
    if (!targets.empty()) parts[i].targets = targets[i];
  }
  return parts;
}

void PipelineStage::sendActivation(const std::vector<int64_t>& key, const at::Tensor& y) {
  const int next = stage_ + 1;
  if (!announced_[key]) {
    LOCKSTEP_CHECK(y.dim() <= kHeaderSize - 2, "pipeline stage ", stage_, ": an activation of ", y.dim(),
                   " dimensions (at most ", kHeaderSize - 2, ")");
    at::Tensor header = at::zeros({kHeaderSize}, at::kLong);
    header[0] = static_cast<int64_t>(y.scalar_type());
    header[1] = y.dim();
    for (int64_t d = 0; d < y.dim(); ++d) header[2 + d] = y.size(d);
    pendingSends_.push_back(comm_->send(header, next, kHeaderTag));
    announced_[key] = true;
  }
  pendingSends_.push_back(comm_->send(y.contiguous(), next, kActivationTag));
}

/// Posts micro-batch `mb`'s activation receive, after receiving its header when its shape is new.
/// The header is waited for here, before this stage sends anything else back: NCCL pairs the
/// messages of two stages in the order each issued them, whatever their tags, so the previous
/// stage's header and activation must meet this stage's receives before its next gradient send.
/// That wait cannot block the previous stage, which computes this micro-batch's forward before it
/// needs the gradient this stage sends next (GPipe and 1F1B alike).
void PipelineStage::postActivationReceive(Micro& mb, double* waited) {
  if (isFirst() || mb.inputRecv) return;
  auto it = received_.find(mb.key);
  if (it == received_.end()) {
    const auto t0 = Clock::now();
    at::Tensor header = at::zeros({kHeaderSize}, at::kLong);
    comm_->recv(header, stage_ - 1, kHeaderTag)->wait();
    *waited += since(t0);
    it =
        received_
            .emplace(mb.key, std::vector<int64_t>(header.data_ptr<int64_t>(), header.data_ptr<int64_t>() + kHeaderSize))
            .first;
  }
  const auto& h = it->second;
  std::vector<int64_t> sizes(h.begin() + 2, h.begin() + 2 + h[1]);
  mb.input = at::empty(sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(h[0])).device(options_.device));
  mb.inputRecv = comm_->recv(mb.input, stage_ - 1, kActivationTag);
}

at::Tensor PipelineStage::receiveActivation(Micro& mb, double* waited) {
  postActivationReceive(mb, waited);
  const auto t0 = Clock::now();
  mb.inputRecv->wait();
  mb.inputRecv.reset();
  *waited += since(t0);
  return std::exchange(mb.input, at::Tensor());
}

void PipelineStage::runForward(std::vector<Micro>& micro, const std::vector<Batch>& parts, int m,
                               const OutputLossFn& loss, double scale) {
  Micro& mb = micro[static_cast<size_t>(m)];
  const Batch& part = parts[static_cast<size_t>(m)];
  PipelineTimings::Op& rec = timings_.ops.back();
  at::Tensor x = part.inputs;
  if (!isFirst()) {
    x = receiveActivation(mb, &rec.waitSeconds);
    x.requires_grad_(true);
    mb.input = x;
    if (static_cast<size_t>(m) + 1 < micro.size()) {
      postActivationReceive(micro[static_cast<size_t>(m) + 1], &rec.waitSeconds);
    }
  }
  AutocastGuard amp(options_.precision, options_.device.type());
  at::Tensor y = runLayers(x);
  if (isLast()) {
    const double share = static_cast<double>(part.inputs.size(0)) / static_cast<double>(totalRows_);
    mb.output = loss(y, part).to(at::kFloat) * (share * scale);
    lossSum_ += mb.output.item<double>() / scale;
  } else {
    mb.output = y;
    sendActivation(mb.key, y.detach());
  }
}

void PipelineStage::runBackward(std::vector<Micro>& micro, int m, bool lastBackward) {
  Micro& mb = micro[static_cast<size_t>(m)];
  PipelineTimings::Op& rec = timings_.ops.back();
  at::Tensor gradient;
  if (!isLast()) {
    const auto t0 = Clock::now();
    gradient = at::empty(mb.output.sizes(), mb.output.options().requires_grad(false));
    comm_->recv(gradient, stage_ + 1, kGradientTag)->wait();
    rec.waitSeconds += since(t0);
  }
  auto run = [&] {
    if (!mb.output.requires_grad()) return;
    if (isLast()) {
      mb.output.backward();
    } else {
      torch::autograd::backward({mb.output}, {gradient});
    }
  };
  if (ddp_ != nullptr && !lastBackward) {
    auto guard = ddp_->noSync();
    run();
  } else {
    run();
  }
  if (!isFirst()) {
    at::Tensor g = mb.input.grad();
    if (!g.defined()) g = at::zeros_like(mb.input);
    pendingSends_.push_back(comm_->send(g.contiguous(), stage_ - 1, kGradientTag));
  }
  mb.input = at::Tensor();
  mb.output = at::Tensor();
}

double PipelineStage::trainBatch(const Batch& batch, const OutputLossFn& loss, double scale) {
  LOCKSTEP_CHECK(!isLast() || loss != nullptr, "PipelineStage::trainBatch: the last stage needs a loss function");
  const auto t0 = Clock::now();
  std::vector<Batch> parts = split(batch, /*fewerIfSmall=*/false);
  totalRows_ = batch.inputs.size(0);
  lossSum_ = 0;
  std::vector<Micro> micro(parts.size());
  for (size_t m = 0; m < parts.size(); ++m) micro[m].key = shapeKey(parts[m].inputs);
  const auto ops = pipelineSchedule(options_.schedule, stages(), stage_, static_cast<int>(parts.size()));
  timings_ = PipelineTimings{};
  const bool trackBytes = tensorMemoryTracked();
  const int64_t liveAtStart = trackBytes ? liveTensorBytes() - gradientBytes() : 0;
  int live = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipelineOp& op = ops[i];
    timings_.ops.push_back({op, since(t0), 0, 0});
    if (op.kind == PipelineOp::kForward) {
      runForward(micro, parts, op.micro, loss, scale);
      timings_.peakInFlight = std::max(timings_.peakInFlight, ++live);
      if (trackBytes) {  // what forward left allocated, less the gradients backward made so far
        timings_.peakStoredBytes =
            std::max(timings_.peakStoredBytes, liveTensorBytes() - liveAtStart - gradientBytes());
      }
    } else {
      runBackward(micro, op.micro, /*lastBackward=*/i + 1 == ops.size());
      --live;
    }
    auto& rec = timings_.ops.back();
    rec.end = since(t0);
    timings_.computeSeconds += rec.end - rec.start - rec.waitSeconds;
  }
  for (auto& w : pendingSends_) w->wait();
  pendingSends_.clear();
  std::vector<at::Tensor> total{at::tensor({lossSum_}, at::kDouble)};
  comm_->broadcast(total, stages() - 1)->wait();
  timings_.seconds = since(t0);
  return total[0].item<double>();
}

at::Tensor PipelineStage::forward(const Batch& batch) {
  c10::NoGradGuard noGrad;
  std::vector<Batch> parts = split(batch, /*fewerIfSmall=*/true);
  std::vector<at::Tensor> outputs;
  double waited = 0;
  for (size_t m = 0; m < parts.size(); ++m) {
    Micro mb;
    mb.key = shapeKey(parts[m].inputs);
    at::Tensor x = isFirst() ? parts[m].inputs : receiveActivation(mb, &waited);
    AutocastGuard amp(options_.precision, options_.device.type());
    at::Tensor y = runLayers(x);
    if (isLast()) {
      outputs.push_back(y);
    } else {
      sendActivation(mb.key, y);
    }
  }
  for (auto& w : pendingSends_) w->wait();
  pendingSends_.clear();
  return isLast() ? at::cat(outputs) : at::Tensor();
}

}  // namespace lockstep
