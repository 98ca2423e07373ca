#pragma once
// Durable, all-or-nothing file writes. A reader must never see half a file, whatever kills the
// writer (SIGKILL, OOM killer, power loss): data goes to a temporary name in the same folder,
// is fsynced, renamed over the final name (atomic on POSIX file systems), and the folder is
// fsynced so the rename itself survives a crash.
//
// FileWriter is the plain building block (write everything, count bytes, CRC-32 on the fly);
// AtomicFile wraps it with the temp-name/rename protocol. Checkpoint folders (a set of files
// that must appear together) are in checkpoint_dir.h.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tarn {

// Writes to a new file (created or truncated, mode 0644), loops over short writes and EINTR,
// and keeps the byte count and CRC-32 of everything written. Errors name the file and errno.
class FileWriter {
 public:
  FileWriter() = default;
  explicit FileWriter(std::string path);
  ~FileWriter();  // closes (without fsync) if still open
  FileWriter(FileWriter&& o) noexcept;
  FileWriter& operator=(FileWriter&& o) noexcept;
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void sync();   // fsync: data and size are on disk when it returns
  void close();  // reports errors close(2) reports (e.g. deferred ENOSPC on network file systems)

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return bytes_; }
  uint32_t crc32() const { return crc_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// Writes `path` atomically: to "<path>.tmp.<pid>", then commit() fsyncs it, renames it over
// `path` and fsyncs the folder. Destroyed without commit() (an exception, an early return), it
// removes the temporary file and leaves `path` as it was. A writer killed outright leaves the
// temporary behind: remove_stale_temp_files() cleans those up.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  FileWriter& out() { return out_; }
  void write(const void* data, size_t n) { out_.write(data, n); }
  void write(std::string_view s) { out_.write(s); }
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_, temp_;
  FileWriter out_;
  bool committed_ = false;
};

// One-shot form of AtomicFile.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The whole file; errors name the file.
std::string read_file(const std::string& path);

// fsync on a folder, so that entries created, renamed or removed in it are durable. File systems
// that do not support it (EINVAL) are tolerated.
void fsync_directory(const std::string& dir);

// The folder holding `path` ("." for a bare name).
std::string parent_directory(const std::string& path);

// Removes "<name>.tmp.<pid>" files in `dir` whose writer process no longer exists (temporaries
// of live processes, e.g. another rank still writing, are kept). Returns the removed paths.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

// 37748736 -> "37,748,736", for messages that a person reads.
std::string with_commas(uint64_t n);

}  // namespace tarn
