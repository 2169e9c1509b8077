// host_discovery.h — `lockstep run --host-discovery SCRIPT`: how many workers an elastic job
// should hold, as a script says it, run again every interval (as Horovod's discovery script).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/child_process.h"

namespace lockstep::detail {

/// The slots of this node in a discovery script's output: one "HOST:SLOTS" (or "HOST", one slot)
/// per line, blank lines and "#" comments ignored; a host not in `thisNode` is named in
/// `otherHosts`. Throws Error naming the line that is neither.
int slotsOfThisNode(const std::string& output, const std::vector<std::string>& thisNode,
                    std::vector<std::string>* otherHosts);

/// Runs the script (sh -c) at most once per interval without blocking the caller: poll() starts
/// it when due and reads it as it runs. A script that fails, runs past its timeout or prints
/// garbage is said on stderr (once until it works again) and changes nothing.
class HostDiscovery {
 public:
  HostDiscovery(std::string script, std::chrono::milliseconds interval, std::map<std::string, std::string> env);
  ~HostDiscovery();

  /// This node's slots when a run of the script has just ended well; nullopt otherwise.
  std::optional<int> poll();

 private:
  std::optional<int> finish();
  /// Says `what` on stderr unless it was the last thing said; `keeps`: nothing changes for it.
  void sayOnce(const std::string& what, bool keeps = true);

  const std::string script_;
  const std::chrono::milliseconds interval_;
  const std::map<std::string, std::string> env_;
  const std::vector<std::string> thisNode_;
  std::unique_ptr<ChildProcess> running_;
  std::string output_;
  std::chrono::steady_clock::time_point startedAt_;
  std::chrono::steady_clock::time_point nextRun_;
  std::string lastSaid_;
};

}  // namespace lockstep::detail
