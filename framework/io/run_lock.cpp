#include "framework/io/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "kernels/check.h"

namespace tarn {

RunLock::RunLock(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TARN_CHECK(fd_ >= 0, path, ": cannot open the run's lock file (", std::strerror(errno), ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw Error(str_cat(path, ": cannot lock (", std::strerror(err), ")"));
    const std::string who = n > 0 ? str_cat(" (process ", std::string(holder, static_cast<size_t>(n)), ")") : "";
    throw Error(str_cat("another tarn train", who, " is using ", dir,
                        ": two runs on one checkpoints.dir would overwrite each other's checkpoints. "
                        "Wait for it, stop it, or set another checkpoints.dir"));
  }
  // Who holds it, for the message of the next one that tries.
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the note; the next run's message just lacks the process id.
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace tarn
