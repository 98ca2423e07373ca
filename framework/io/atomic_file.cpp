#include "framework/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "framework/io/crc32.h"
#include "kernels/check.h"

namespace tarn {
namespace fs = std::filesystem;

namespace {
std::string errno_text(int err) { return std::strerror(err); }
}  // namespace

// ---------------------------------------------------------------------------------------------
// FileWriter

FileWriter::FileWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TARN_CHECK(fd_ >= 0, path_, ": cannot create: ", errno_text(errno));
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

FileWriter::FileWriter(FileWriter&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), bytes_(o.bytes_), crc_(o.crc_) {
  o.fd_ = -1;
}

FileWriter& FileWriter::operator=(FileWriter&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    bytes_ = o.bytes_;
    crc_ = o.crc_;
    o.fd_ = -1;
  }
  return *this;
}

void FileWriter::write(const void* data, size_t n) {
  TARN_CHECK(fd_ >= 0, path_, ": write after close");
  crc_ = tarn::crc32(data, n, crc_);
  const char* p = static_cast<const char*>(data);
  size_t left = n;
  while (left > 0) {
    // Linux writes at most ~2 GiB per call; ask for less and loop.
    const size_t chunk = left < (size_t{1} << 30) ? left : (size_t{1} << 30);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw Error(str_cat(path_, ": write failed after ", with_commas(bytes_ + (n - left)), " bytes: ",
                          errno_text(err), err == ENOSPC ? " (the disk is full)" : ""));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  bytes_ += n;
}

void FileWriter::sync() {
  TARN_CHECK(fd_ >= 0, path_, ": fsync after close");
  while (::fsync(fd_) != 0) {
    if (errno == EINTR) continue;
    throw Error(str_cat(path_, ": fsync failed: ", errno_text(errno)));
  }
}

void FileWriter::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // Do not retry close() on EINTR: on Linux the descriptor is released either way.
  TARN_CHECK(::close(fd) == 0 || errno == EINTR, path_, ": close failed: ", errno_text(errno));
}

// ---------------------------------------------------------------------------------------------
// AtomicFile

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_(path_ + ".tmp." + std::to_string(::getpid())) {
  try {
    out_ = FileWriter(temp_);
  } catch (const Error& e) {
    throw Error(str_cat(path_, ": cannot write (", e.what(), ")"));
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  out_ = FileWriter();  // closes
  ::unlink(temp_.c_str());
}

void AtomicFile::commit() {
  TARN_CHECK(!committed_, path_, ": committed twice");
  out_.sync();
  out_.close();
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    throw Error(str_cat(path_, ": cannot rename ", temp_, " into place: ", errno_text(errno)));
  committed_ = true;
  fsync_directory(parent_directory(path_));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

// ---------------------------------------------------------------------------------------------
// Helpers

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TARN_CHECK(fd >= 0, path, ": cannot open: ", errno_text(errno));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw Error(str_cat(path, ": read failed: ", errno_text(err)));
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TARN_CHECK(fd >= 0, dir, ": cannot open folder to fsync it: ", errno_text(errno));
  int rc;
  while ((rc = ::fsync(fd)) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(fd);
  TARN_CHECK(rc == 0 || err == EINVAL || err == EROFS, dir, ": fsync of the folder failed: ",
             errno_text(err));
}

std::string parent_directory(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at == 0) continue;
    const std::string pid_text = name.substr(at + 5);
    if (pid_text.empty() || pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    const bool alive = pid == ::getpid() || ::kill(pid, 0) == 0 || errno == EPERM;
    if (alive) continue;
    std::error_code rm;
    fs::remove_all(entry.path(), rm);
    if (!rm) removed.push_back(entry.path().string());
  }
  return removed;
}

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace tarn
