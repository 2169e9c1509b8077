// lockstep/ddp/no_sync.h — the noSync() scope of DistributedDataParallel,
// ShardedDataParallel and FullyShardedDataParallel: while it lives, backward
// only accumulates local gradients; the first synchronised backward after it
// averages the accumulated sum.
#pragma once

namespace lockstep {

/// Turns `owner`'s gradient sync off for its lifetime and restores what it was.
template <class Owner>
class NoSyncScope {
 public:
  explicit NoSyncScope(Owner& owner) : owner_(owner), previous_(owner.syncEnabled()) { owner_.setSyncEnabled(false); }
  ~NoSyncScope() { owner_.setSyncEnabled(previous_); }
  NoSyncScope(const NoSyncScope&) = delete;
  NoSyncScope& operator=(const NoSyncScope&) = delete;

 private:
  Owner& owner_;
  bool previous_;
};

}  // namespace lockstep
