// lockstep/ddp/comm_hook.h — how a bucket of gradients is averaged across ranks.
//
// A CommHook turns one flat float32 bucket into its average over the ranks.
// start() runs on the backward thread right after the bucket's last gradient
// arrived and must only launch asynchronous work; finish() runs in
// DistributedDataParallel::finishGradientSync() after that work completed and
// leaves the average in bucket.buffer. Built-in hooks: plain allreduce, and
// fp16/bf16 compression (the bucket travels in 2-byte floats, halving the
// bytes on the wire; arithmetic after decompression is float32).
#pragma once

#include <memory>
#include <string>

#include "lockstep/comm/communicator.h"

namespace lockstep {

struct GradBucket {
  int index = 0;
  at::Tensor* buffer = nullptr;   ///< flat float32 gradients of the bucket, averaged in place
  at::Tensor* scratch = nullptr;  ///< a tensor the hook may keep between start() and finish()
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual WorkHandle start(Communicator& comm, GradBucket& bucket) = 0;
  virtual void finish(Communicator& comm, GradBucket& bucket) = 0;
};

enum class GradCompression { kNone, kFp16, kBf16 };
const char* toString(GradCompression c);
/// "none", "fp16", "bf16" -> GradCompression; throws ConfigError naming `what`.
GradCompression parseGradCompression(const std::string& text, const std::string& what);

std::shared_ptr<CommHook> makeCommHook(GradCompression compression);

}  // namespace lockstep
