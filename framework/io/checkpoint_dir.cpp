#include "framework/io/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "framework/io/crc32.h"
#include "framework/io/json.h"
#include "framework/io/utf8.h"
#include "kernels/check.h"

namespace tarn {
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestFormat = "tarn-checkpoint";
constexpr int64_t kManifestVersion = 1;

std::string strip_trailing_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

CheckpointCrashHook crash_hook = nullptr;

void crash_point(const std::string& instant) {
  if (crash_hook) crash_hook(instant);
}

bool exists_no_follow(const std::string& path) {
  std::error_code ec;
  return fs::symlink_status(path, ec).type() != fs::file_type::not_found && !ec;
}

// "step_1200" -> 1200; nullopt for anything else.
std::optional<int64_t> parse_step(std::string_view name) {
  if (name.substr(0, 5) != "step_") return std::nullopt;
  const std::string_view digits = name.substr(5);
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  int64_t step = 0;
  for (char c : digits) step = step * 10 + (c - '0');
  return step;
}

void rename_or_throw(const std::string& from, const std::string& to, std::string_view what) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw Error(str_cat(what, ": cannot rename ", from, " to ", to, ": ", std::strerror(errno)));
}

// Removes a folder so that no reader can ever see it half-deleted under its real name.
void remove_dir_safely(const std::string& dir) {
  const std::string doomed = dir + ".removing.tmp";
  std::error_code ec;
  fs::remove_all(doomed, ec);
  rename_or_throw(dir, doomed, "removing " + dir);
  fsync_directory(parent_directory(dir));
  crash_point("moved aside " + dir);
  fs::remove_all(doomed, ec);
  TARN_CHECK(!ec, doomed, ": cannot remove: ", ec.message());
}

// Calls fn(data, n) over the file's contents in 1 MiB pieces.
template <typename Fn>
void for_each_chunk(const std::string& path, Fn&& fn) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TARN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  std::vector<char> buf(size_t{1} << 20);
  while (true) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(str_cat(path, ": read failed: ", std::strerror(err)));
    }
    if (r == 0) break;
    try {
      fn(buf.data(), static_cast<size_t>(r));
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  ::close(fd);
}

uint32_t crc32_of_file(const std::string& path) {
  uint32_t crc = 0;
  for_each_chunk(path, [&](const char* p, size_t n) { crc = crc32(p, n, crc); });
  return crc;
}

void copy_file_into(const std::string& path, FileWriter& out) {
  for_each_chunk(path, [&](const char* p, size_t n) { out.write(p, n); });
}

bool valid_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos && is_valid_utf8(name);
}

uint32_t parse_crc_hex(const json::Json& v, const std::string& what) {
  const std::string& s = json::as_string(v, what);
  TARN_CHECK(s.size() == 8 && s.find_first_not_of("0123456789abcdef") == std::string::npos, what,
             ": expected 8 lower-case hex digits, got \"", s, "\"");
  return static_cast<uint32_t>(std::stoul(s, nullptr, 16));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CheckpointWriter

void set_checkpoint_crash_hook(CheckpointCrashHook hook) { crash_hook = hook; }

CheckpointWriter::CheckpointWriter(std::string dir)
    : dir_(strip_trailing_slashes(std::move(dir))), tmp_(dir_ + ".tmp") {
  const std::string parent = parent_directory(dir_);
  TARN_CHECK(fs::is_directory(parent), "checkpoint ", dir_, ": folder ", parent, " does not exist");
  std::error_code ec;
  fs::remove_all(tmp_, ec);  // left by a writer that was killed
  TARN_CHECK(!ec, "checkpoint ", dir_, ": cannot remove stale ", tmp_, ": ", ec.message());
  fs::create_directory(tmp_, ec);
  TARN_CHECK(!ec, "checkpoint ", dir_, ": cannot create ", tmp_, ": ", ec.message());
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void CheckpointWriter::check_name(const std::string& name) const {
  TARN_CHECK(!committed_, "checkpoint ", dir_, ": ", name, " written after commit()");
  TARN_CHECK(valid_file_name(name), "checkpoint ", dir_, ": \"", name, "\" is not a plain file name");
  TARN_CHECK(name != kManifestFile && name != kCompleteFile, "checkpoint ", dir_, ": ", name,
             " is reserved for the checkpoint's own bookkeeping");
  for (const auto& f : files_)
    TARN_CHECK(f.name != name, "checkpoint ", dir_, ": ", name, " written twice");
}

FileWriter CheckpointWriter::open_file(const std::string& name) {
  check_name(name);
  return FileWriter(join(tmp_, name));
}

void CheckpointWriter::finish_file(FileWriter& writer) {
  const std::string name = fs::path(writer.path()).filename().string();
  TARN_CHECK(writer.is_open() && writer.path() == join(tmp_, name), "checkpoint ", dir_, ": finish_file(",
             writer.path(), ") for a file this writer did not open, or twice");
  check_name(name);
  writer.sync();
  writer.close();
  files_.push_back({name, writer.bytes_written(), writer.crc32()});
  crash_point(str_cat("wrote ", join(tmp_, name)));
}

void CheckpointWriter::write_file(const std::string& name, std::string_view bytes) {
  FileWriter w = open_file(name);
  w.write(bytes);
  finish_file(w);
}

void CheckpointWriter::write_safetensors(const std::string& name, const TensorList& tensors,
                                         const SafetensorsMetadata& metadata) {
  FileWriter w = open_file(name);
  tarn::write_safetensors(w, tensors, metadata, str_cat("checkpoint ", dir_, ": ", name));
  finish_file(w);
}

void CheckpointWriter::commit() {
  TARN_CHECK(!committed_, "checkpoint ", dir_, ": committed twice");
  const std::string what = "checkpoint " + dir_;

  json::Json info = json::Json::object();
  for (const auto& [k, v] : info_) info[k] = v;
  json::Json files = json::Json::array();
  for (const auto& f : files_)
    files.push_back(json::Json::object({{"name", json::Json(f.name)},
                                         {"bytes", json::Json(f.bytes)},
                                         {"crc32", json::Json(crc32_hex(f.crc32))}}));
  const json::Json manifest = json::Json::object({{"format", json::Json(kManifestFormat)},
                                                    {"version", json::Json(kManifestVersion)},
                                                    {"info", info},
                                                    {"files", files}});
  const std::string manifest_text = json::dump(manifest, 2) + "\n";
  {
    FileWriter w(join(tmp_, kManifestFile));
    w.write(manifest_text);
    w.sync();
    w.close();
  }
  fsync_directory(tmp_);
  crash_point(str_cat("wrote ", join(tmp_, kManifestFile)));

  // Into place. A folder of the same name (a re-save of this step, or one left without COMPLETE)
  // is moved aside first: rename() cannot replace a non-empty folder.
  const std::string parent = parent_directory(dir_);
  const std::string old = dir_ + ".old.tmp";
  const bool replacing = exists_no_follow(dir_);
  if (replacing) {
    std::error_code ec;
    fs::remove_all(old, ec);
    rename_or_throw(dir_, old, what);
    crash_point("moved aside " + dir_);
  }
  if (::rename(tmp_.c_str(), dir_.c_str()) != 0) {
    const int err = errno;
    if (replacing) ::rename(old.c_str(), dir_.c_str());
    throw Error(str_cat(what, ": cannot rename ", tmp_, " into place: ", std::strerror(err)));
  }
  fsync_directory(parent);
  crash_point("renamed " + tmp_ + " to " + dir_);

  // The completion marker, last: readers ignore the folder until it exists.
  const json::Json complete = json::Json::object(
      {{"manifest_bytes", json::Json(uint64_t{manifest_text.size()})},
       {"manifest_crc32", json::Json(crc32_hex(crc32(manifest_text.data(), manifest_text.size())))}});
  write_file_atomic(join(dir_, kCompleteFile), json::dump(complete) + "\n");
  committed_ = true;
  crash_point(str_cat("wrote ", join(dir_, kCompleteFile)));

  if (replacing) {
    std::error_code ec;
    fs::remove_all(old, ec);
    fsync_directory(parent);
  }
}

// ---------------------------------------------------------------------------------------------
// Reading

bool Checkpoint::has(std::string_view name) const {
  for (const auto& f : files)
    if (f.name == name) return true;
  return false;
}

std::string Checkpoint::path(std::string_view name) const {
  TARN_CHECK(has(name), "checkpoint ", dir, ": has no file ", name, " (its manifest lists ", files.size(),
             " files)");
  return dir + "/" + std::string(name);
}

Checkpoint open_checkpoint(const std::string& dir_in, bool verify_checksums) {
  const std::string dir = strip_trailing_slashes(dir_in);
  const std::string what = "checkpoint " + dir;
  TARN_CHECK(fs::is_directory(dir), what, ": no such folder");
  TARN_CHECK(fs::is_regular_file(join(dir, kCompleteFile)), what, ": incomplete (no ", kCompleteFile,
             " marker: its writer stopped before finishing); use an earlier checkpoint");

  const json::Json complete = json::parse(read_file(join(dir, kCompleteFile)), what + ": " + kCompleteFile);
  const json::Json* bytes_field = json::find(complete, "manifest_bytes");
  const json::Json* crc_field = json::find(complete, "manifest_crc32");
  TARN_CHECK(bytes_field && crc_field, what, ": ", kCompleteFile, " lacks manifest_bytes or manifest_crc32");
  const uint64_t manifest_bytes = json::as_u64(*bytes_field, what + ": COMPLETE manifest_bytes");
  const uint32_t manifest_crc = parse_crc_hex(*crc_field, what + ": COMPLETE manifest_crc32");

  TARN_CHECK(fs::is_regular_file(join(dir, kManifestFile)), what, ": ", kManifestFile, " is missing");
  const std::string manifest_text = read_file(join(dir, kManifestFile));
  TARN_CHECK(manifest_text.size() >= manifest_bytes, what, ": ", kManifestFile, " is truncated (expected ",
             with_commas(manifest_bytes), " bytes, found ", with_commas(manifest_text.size()), ")");
  TARN_CHECK(manifest_text.size() == manifest_bytes, what, ": ", kManifestFile, " is larger than recorded (expected ",
             with_commas(manifest_bytes), " bytes, found ", with_commas(manifest_text.size()), ")");
  const uint32_t actual_manifest_crc = crc32(manifest_text.data(), manifest_text.size());
  TARN_CHECK(actual_manifest_crc == manifest_crc, what, ": ", kManifestFile, " is corrupted (CRC-32 ",
             crc32_hex(actual_manifest_crc), ", COMPLETE records ", crc32_hex(manifest_crc), ")");

  const std::string mwhat = what + ": " + kManifestFile;
  const json::Json manifest = json::parse(manifest_text, mwhat);
  const json::Json* format = json::find(manifest, "format");
  TARN_CHECK(format && format->is_string() && json::as_string(*format, "") == kManifestFormat, mwhat,
             ": not a tarn checkpoint manifest (\"format\" is not \"", kManifestFormat, "\")");
  const json::Json* version = json::find(manifest, "version");
  TARN_CHECK(version && version->is_number(), mwhat, ": missing \"version\"");
  TARN_CHECK(json::is_integer(*version, kManifestVersion), mwhat, ": version ", version->dump(),
             " is not supported (this build reads version ", kManifestVersion, ")");

  Checkpoint ck;
  ck.dir = dir;
  if (const json::Json* info = json::find(manifest, "info"))
    for (const auto& [k, v] : json::members(*info, mwhat + ": info")) ck.info[k] = json::as_string(v, mwhat + ": info." + k);
  const json::Json* files = json::find(manifest, "files");
  TARN_CHECK(files, mwhat, ": missing \"files\"");
  for (const json::Json& f : json::items(*files, mwhat + ": files")) {
    CheckpointFile cf;
    const json::Json* name = json::find(f, "name");
    const json::Json* bytes = json::find(f, "bytes");
    const json::Json* crc = json::find(f, "crc32");
    TARN_CHECK(name && bytes && crc, mwhat, ": an entry of \"files\" lacks name, bytes or crc32");
    cf.name = json::as_string(*name, mwhat + ": files[].name");
    TARN_CHECK(valid_file_name(cf.name), mwhat, ": \"", cf.name, "\" is not a plain file name");
    cf.bytes = json::as_u64(*bytes, mwhat + ": " + cf.name + ".bytes");
    cf.crc32 = parse_crc_hex(*crc, mwhat + ": " + cf.name + ".crc32");
    ck.files.push_back(cf);
  }

  for (const CheckpointFile& f : ck.files) {
    const std::string path = join(dir, f.name);
    std::error_code ec;
    TARN_CHECK(fs::is_regular_file(path, ec), what, ": ", f.name, " is missing");
    const uint64_t size = fs::file_size(path, ec);
    TARN_CHECK(!ec, what, ": ", f.name, ": cannot read its size: ", ec.message());
    TARN_CHECK(size >= f.bytes, what, ": ", f.name, " is truncated (expected ", with_commas(f.bytes),
               " bytes, found ", with_commas(size), ")");
    TARN_CHECK(size == f.bytes, what, ": ", f.name, " is larger than recorded (expected ", with_commas(f.bytes),
               " bytes, found ", with_commas(size), ")");
    if (verify_checksums) {
      const uint32_t actual = crc32_of_file(path);
      TARN_CHECK(actual == f.crc32, what, ": ", f.name, " is corrupted (CRC-32 ", crc32_hex(actual), ", ",
                 kManifestFile, " records ", crc32_hex(f.crc32), ")");
    }
  }
  return ck;
}

// ---------------------------------------------------------------------------------------------
// Run folders

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  TARN_CHECK(step >= 0, "checkpoint_dir: negative step ", step);
  return join(strip_trailing_slashes(run_dir), "step_" + std::to_string(step));
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& run_dir_in) {
  const std::string run_dir = strip_trailing_slashes(run_dir_in);
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto step = parse_step(name);
    if (!step || !entry.is_directory(ec)) continue;
    if (!fs::is_regular_file(entry.path() / kCompleteFile, ec)) continue;
    out.push_back({*step, join(run_dir, name)});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<Checkpoint> latest_valid_checkpoint(const std::string& run_dir, std::vector<std::string>* rejected) {
  const auto all = list_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      return open_checkpoint(it->dir);
    } catch (const Error& e) {
      if (rejected) rejected->push_back(e.what());
    }
  }
  return std::nullopt;
}

std::vector<std::string> cleanup_incomplete_checkpoints(const std::string& run_dir_in) {
  const std::string run_dir = strip_trailing_slashes(run_dir_in);
  std::vector<std::string> done;
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) entries.push_back(entry.path());
  TARN_CHECK(!ec, run_dir, ": cannot list: ", ec.message());

  // A replaced checkpoint whose replacement never got into place: put it back.
  const std::string old_suffix = ".old.tmp";
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    if (name.size() <= old_suffix.size() || name.compare(name.size() - old_suffix.size(), old_suffix.size(), old_suffix) != 0)
      continue;
    const std::string original = join(run_dir, name.substr(0, name.size() - old_suffix.size()));
    if (!exists_no_follow(original) && fs::is_regular_file(p / kCompleteFile, ec)) {
      rename_or_throw(p.string(), original, "cleanup " + run_dir);
      done.push_back("restored " + original);
    }
  }
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".tmp") != 0) continue;
    if (!exists_no_follow(p.string()) || !fs::is_directory(fs::symlink_status(p, ec))) continue;
    fs::remove_all(p, ec);
    TARN_CHECK(!ec, p.string(), ": cannot remove: ", ec.message());
    done.push_back("removed " + p.string());
  }
  for (const std::string& p : remove_stale_temp_files(run_dir)) done.push_back("removed " + p);
  if (!done.empty()) fsync_directory(run_dir);
  return done;
}

void set_best_checkpoint(const std::string& run_dir_in, int64_t step) {
  const std::string run_dir = strip_trailing_slashes(run_dir_in);
  const std::string target_name = "step_" + std::to_string(step);
  const std::string target = join(run_dir, target_name);
  TARN_CHECK(fs::is_regular_file(join(target, kCompleteFile)), "set_best_checkpoint: ", target,
             " is not a complete checkpoint");
  const std::string best = join(run_dir, "best");
  const std::string tmp_link = best + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove(tmp_link, ec);
  if (::symlink(target_name.c_str(), tmp_link.c_str()) == 0) {
    // A directory `best` (an earlier copy) cannot be replaced by rename(); remove it first.
    if (fs::is_directory(fs::symlink_status(best, ec))) remove_dir_safely(best);
    rename_or_throw(tmp_link, best, "set_best_checkpoint");
    fsync_directory(run_dir);
    crash_point("linked " + best);
    return;
  }
  // No symlinks here (some network and FUSE file systems): a verified copy.
  const Checkpoint src = open_checkpoint(target);
  CheckpointWriter w(best);
  for (const CheckpointFile& f : src.files) {
    FileWriter out = w.open_file(f.name);
    copy_file_into(src.path(f.name), out);
    w.finish_file(out);
  }
  for (const auto& [k, v] : src.info) w.set_info(k, v);
  w.set_info("copied_from", target_name);
  w.commit();  // replaces an existing `best`, folder or symlink
}

std::optional<int64_t> best_checkpoint_step(const std::string& run_dir_in) {
  const std::string best = join(strip_trailing_slashes(run_dir_in), "best");
  std::error_code ec;
  const auto status = fs::symlink_status(best, ec);
  if (ec || status.type() == fs::file_type::not_found) return std::nullopt;
  if (fs::is_symlink(status)) {
    const fs::path target = fs::read_symlink(best, ec);
    if (ec) return std::nullopt;
    return parse_step(target.filename().string());
  }
  if (fs::is_directory(status) && fs::is_regular_file(join(best, kManifestFile), ec)) {
    const json::Json manifest = json::parse(read_file(join(best, kManifestFile)), best + "/" + kManifestFile);
    if (const json::Json* info = json::find(manifest, "info"))
      if (const json::Json* from = json::find(*info, "copied_from"); from && from->is_string())
        return parse_step(json::as_string(*from, ""));
  }
  return std::nullopt;
}

std::vector<std::string> prune_checkpoints(const std::string& run_dir_in, int keep_last) {
  TARN_CHECK(keep_last >= 1, "prune_checkpoints: keep_last must be at least 1 (got ", keep_last,
             "): the newest checkpoint is what a resumed run starts from");
  const std::string run_dir = strip_trailing_slashes(run_dir_in);
  const auto complete = list_checkpoints(run_dir);
  std::set<int64_t> keep;
  for (size_t i = complete.size() > static_cast<size_t>(keep_last) ? complete.size() - keep_last : 0;
       i < complete.size(); ++i)
    keep.insert(complete[i].step);
  // Only a symlinked best depends on its step folder; a copy stands on its own.
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(join(run_dir, "best"), ec)))
    if (const auto best = best_checkpoint_step(run_dir)) keep.insert(*best);

  std::vector<std::string> removed;
  for (const auto& c : complete) {
    if (keep.count(c.step)) continue;
    remove_dir_safely(c.dir);
    removed.push_back(c.dir);
  }
  // step_N folders without COMPLETE that are older than the newest complete checkpoint: a writer
  // stopped between rename and marker; nothing will ever complete them.
  if (!complete.empty()) {
    const int64_t newest = complete.back().step;
    std::vector<std::string> stale;
    for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
      const std::string name = entry.path().filename().string();
      const auto step = parse_step(name);
      if (!step || *step >= newest || !entry.is_directory(ec) || keep.count(*step)) continue;
      if (!fs::is_regular_file(entry.path() / kCompleteFile, ec)) stale.push_back(join(run_dir, name));
    }
    for (const std::string& dir : stale) {
      remove_dir_safely(dir);
      removed.push_back(dir);
    }
  }
  return removed;
}

}  // namespace tarn
