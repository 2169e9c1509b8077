// lockstep/ddp/gradient_sync.h — what DistributedDataParallel,
// ShardedDataParallel (ZeRO-2) and FullyShardedDataParallel (ZeRO-3) have in
// common: one gradient-bucket engine under them, so one interface over them.
//
//   lockstep::GradientSync& sync = ddp;      // or a ZeRO-2 / ZeRO-3 object
//   { auto guard = sync.noSync(); lossOf(micro1).backward(); }   // accumulate only
//   lossOf(micro2).backward();               // buckets launched while backward runs
//   sync.finishGradientSync();               // every bucket done; stats() and lastSyncTimings() updated
//
// A front's gradients are packed into buckets launched from autograd hooks, in
// one order on every rank, as soon as a bucket's last gradient is ready;
// finishGradientSync() launches what is left, waits for every bucket and puts
// the result in place (DDP: the averages in .grad; ZeRO: this rank's pieces).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace lockstep {

namespace detail {
class GradientReducer;
}

/// What a gradient front (DDP, ZeRO-2, ZeRO-3) has synchronised: counters for tests and monitoring.
struct SyncStats {
  int64_t syncs = 0;                          ///< finishGradientSync() calls outside noSync()
  int64_t bucketsLaunched = 0;                ///< bucket collectives launched, all steps
  int64_t bucketsLaunchedDuringBackward = 0;  ///< of which from the autograd hooks (overlapped)
  int64_t bytesReduced = 0;                   ///< float32 bytes of gradients averaged
  int64_t bytesSent = 0;  ///< bytes the comm hook handed to collectives (less than bytesReduced when compressing)
};
using DdpStats [[deprecated("renamed lockstep::SyncStats")]] = SyncStats;

/// One bucket's collective in the last synchronised step (timelines, the
/// Trainer's step breakdown).
struct BucketTiming {
  int bucket = 0;                                   ///< index, in launch order
  int64_t bytes = 0;                                ///< float32 gradient bytes of the bucket (before any compression)
  std::chrono::steady_clock::time_point launched;   ///< handed to the collective
  std::chrono::steady_clock::time_point completed;  ///< the backend finished it (Work::completedAt())
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  /// Waits for every bucket, launching late ones, and puts the averages in place. Collective.
  virtual void finishGradientSync() = 0;
  /// Bytes of the gradients this rank holds now.
  virtual int64_t gradientBytes() const = 0;
  /// Bytes of buffers held besides the gradients (bucket buffers in flight, compression scratch).
  virtual int64_t bufferBytes() const = 0;

  /// While alive, backward does not communicate (gradient accumulation): the
  /// first synchronised backward after it averages the accumulated sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(GradientSync& sync) : sync_(sync), previous_(sync.syncEnabled()) {
      sync_.setSyncEnabled(false);
    }
    ~NoSyncGuard() { sync_.setSyncEnabled(previous_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    GradientSync& sync_;
    bool previous_;
  };
  NoSyncGuard noSync() { return NoSyncGuard(*this); }
  void setSyncEnabled(bool enabled);
  bool syncEnabled() const;

  const SyncStats& stats() const;
  /// Per bucket, in launch order, the timing of the last finishGradientSync()
  /// that communicated; empty before the first one. Valid until the next one.
  const std::vector<BucketTiming>& lastSyncTimings() const;

 protected:
  GradientSync() = default;
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;
  /// The engine; set by the front's constructor, owned by the front.
  detail::GradientReducer* reducer_ = nullptr;
};

}  // namespace lockstep
