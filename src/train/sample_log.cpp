// trainer.sample_log's writer (sample_log.h).
#include "train/sample_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {
std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "host";
  return name;
}
}  // namespace

SampleLog::SampleLog(const std::string& dir, const Run& run, int64_t attempt) : attempt_(attempt) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  path_ = (std::filesystem::path(dir) / fmt::format("samples-{}-{}.jsonl", hostName(), getpid())).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw ConfigError(fmt::format("trainer.sample_log: cannot write {}: {}{}", path_, std::strerror(errno),
                                  ec ? fmt::format(" (creating {}: {})", dir, ec.message()) : ""));
  }
  write(fmt::format(R"({{"kind":"run","attempt":{},"samples":{},"global_batch":{},"steps_per_epoch":{},)"
                    R"("total_steps":{},"accumulation":{}}})",
                    attempt_, run.samples, run.globalBatch, run.stepsPerEpoch, run.totalSteps, run.accumulation));
}

SampleLog::~SampleLog() {
  if (fd_ >= 0) ::close(fd_);
}

std::string SampleLog::where() const {
  return fmt::format(R"("attempt":{},"gen":{},"rank":{})", attempt_, generation_, rank_);
}

void SampleLog::generation(int64_t number, int rank, int world, int64_t fromStep) {
  generation_ = number;
  rank_ = rank;
  write(fmt::format(R"({{"kind":"generation",{},"world":{},"from":{}}})", where(), world, fromStep));
}

void SampleLog::micro(int64_t epoch, int64_t step, int64_t micro, const std::vector<int64_t>& ids) {
  write(fmt::format(R"({{"kind":"micro",{},"epoch":{},"step":{},"micro":{},"ids":[{}]}})", where(), epoch, step, micro,
                    fmt::join(ids, ",")));
}

void SampleLog::stepDone(int64_t step) { write(fmt::format(R"({{"kind":"done",{},"step":{}}})", where(), step)); }

/// One line in one write(2) where it can (O_APPEND: lines of processes sharing a file never mix).
void SampleLog::write(const std::string& line) {
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("trainer.sample_log: writing {} failed: {}", path_, std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
}

}  // namespace lockstep::detail
