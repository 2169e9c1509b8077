// Slurm through its commands (slurm.h).
#include "sweep/slurm.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>

#include "common/posix_io.h"
#include "common/shell_text.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/token.h"

namespace lockstep::sweep {

namespace {

bool onPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return false;
}

}  // namespace

std::pair<int, std::string> runCapture(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("pipe failed: {}", std::strerror(errno)));
  detail::Fd readEnd(fds[0]), writeEnd(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, writeEnd.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, writeEnd.get(), 2);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(fmt::format("cannot run {}: {}", argv[0], std::strerror(rc)));
  writeEnd.reset();
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(readEnd.get(), buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return {WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status), out};
}

std::string batchScript(const BatchOptions& o, const std::vector<std::string>& command) {
  std::string s = "#!/bin/bash\n# Written by lockstep (docs/sweeps.md#slurm): every task is one worker.\n";
  if (!o.jobName.empty()) s += fmt::format("#SBATCH --job-name={}\n", o.jobName);
  if (o.nodes > 0) s += fmt::format("#SBATCH --nodes={}\n", o.nodes);
  if (o.ntasksPerNode > 0) s += fmt::format("#SBATCH --ntasks-per-node={}\n", o.ntasksPerNode);
  if (o.ntasks > 0) s += fmt::format("#SBATCH --ntasks={}\n", o.ntasks);
  if (o.cpusPerTask > 0) s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpusPerTask);
  if (!o.time.empty()) s += fmt::format("#SBATCH --time={}\n", o.time);
  if (!o.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", o.partition);
  if (!o.output.empty()) s += fmt::format("#SBATCH --output={}\n#SBATCH --open-mode=append\n", o.output);
  if (!o.chdir.empty()) s += fmt::format("#SBATCH --chdir={}\n", o.chdir);
  s += "# The rendezvous admits only processes holding the job's token; srun hands the environment to every task.\n";
  s += fmt::format("export {}=\"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\"\n", kJobTokenVar);
  if (o.cpusPerTask > 0) s += fmt::format("export {}={}\n", env::kNumThreads, o.cpusPerTask);
  s += "exec srun --kill-on-bad-exit=1";
  for (const auto& a : command) s += " " + detail::shellQuote(a);
  return s + "\n";
}

void requireSlurmCommands(const std::vector<std::string>& commands, const std::string& what) {
  for (const auto& c : commands) {
    if (!onPath(c)) {
      throw ConfigError(
          fmt::format("{}: Slurm's {} is not on PATH; run where Slurm's clients are installed "
                      "(Debian: slurm-client)",
                      what, c));
    }
  }
}

std::string submitBatch(const std::string& scriptPath) {
  auto [rc, out] = runCapture({"sbatch", "--parsable", scriptPath});
  std::smatch m;
  if (rc != 0 || !std::regex_search(out, m, std::regex(R"(^\s*(\d+))"))) {
    throw Error(fmt::format("sbatch {} failed (exit code {}): {}", scriptPath, rc, out));
  }
  return m[1];
}

std::optional<bool> jobActive(const std::string& jobId) {
  auto [rc, out] = runCapture({"squeue", "-h", "-j", jobId, "-o", "%T"});
  if (rc != 0) {
    // squeue fails for a job id it has already forgotten ("Invalid job id specified").
    if (out.find("Invalid job id") != std::string::npos) return false;
    return std::nullopt;
  }
  return out.find_first_not_of(" \n") != std::string::npos;
}

std::optional<JobEnd> jobEnd(const std::string& jobId) {
  std::smatch m;
  auto [rc, out] = runCapture({"scontrol", "show", "job", jobId});
  if (rc == 0 && std::regex_search(out, m, std::regex(R"(JobState=(\S+).*?ExitCode=(\d+):(\d+))"))) {
    int code = std::stoi(m[2]), sig = std::stoi(m[3]);
    return JobEnd{m[1], sig != 0 ? 128 + sig : code};
  }
  // Forgotten by slurmctld (MinJobAge): ask the accounting (a database, or the job completion log).
  for (const auto& flags : {std::vector<std::string>{}, std::vector<std::string>{"-c"}}) {
    std::vector<std::string> argv = {"sacct"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const char* a : {"-n", "-P", "-X", "-o", "State,ExitCode", "-j"}) argv.push_back(a);
    argv.push_back(jobId);
    auto [src, sout] = runCapture(argv);
    if (src == 0 && std::regex_search(sout, m, std::regex(R"(^(\S+?)\|(\d+):(\d+))"))) {
      int code = std::stoi(m[2]), sig = std::stoi(m[3]);
      return JobEnd{m[1], sig != 0 ? 128 + sig : code};
    }
  }
  return std::nullopt;
}

void cancelJob(const std::string& jobId, const std::string& signal) {
  std::vector<std::string> argv = {"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(jobId);
  runCapture(argv);
}

bool insideSlurmAllocation() { return std::getenv("SLURM_JOB_ID") != nullptr; }

}  // namespace lockstep::sweep
