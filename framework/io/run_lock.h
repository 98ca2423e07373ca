#pragma once
// One writer per checkpoints folder: `tarn train` holds an exclusive lock on <dir>/.lock for
// as long as it runs, so that a second run on the same folder is refused at once with the
// first one's process id, instead of both writing (and renaming) checkpoints under each other.
// The lock is flock(2): the kernel drops it when the process ends, however it ends (SIGKILL
// included), so a crashed run never leaves a stale lock behind. The file itself stays.
#include <string>

namespace tarn {

class RunLock {
 public:
  // Takes the lock on `dir` (which must exist) or throws tarn::Error naming the holder.
  explicit RunLock(const std::string& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  static constexpr const char* kFileName = ".lock";

 private:
  int fd_ = -1;
};

}  // namespace tarn
