#include "framework/log/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kernels/check.h"

// The protocol buffers are written by hand: the three messages use five fields, and protobuf
// proper would add protoc, generated code and its runtime for that. CRC-32C comes from Boost's
// crc_optimal (Debian 12 packages no CRC-32C library of its own; zlib's CRC is the IEEE one).

namespace tarn {
namespace fs = std::filesystem;

namespace {

// Protocol-buffer wire types and the field numbers of TensorFlow's event.proto/summary.proto.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, (uint64_t{field} << 3) | wire); }

template <typename T>
void put_little_endian(std::string& out, T v) {  // x86-64 and aarch64 are little-endian
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_header(double wall_time) {
  std::string e;
  put_key(e, kEventWallTime, kFixed64);
  put_little_endian(e, wall_time);
  return e;
}

// Reads a protocol buffer's fields one at a time; stops (ok() false) at anything malformed.
class WireReader {
 public:
  explicit WireReader(std::string_view data) : p_(data.data()), end_(data.data() + data.size()) {}
  bool done() const { return p_ == end_; }
  bool ok() const { return ok_; }
  // The next field's number and wire type; its value must then be read or skipped.
  bool next(uint32_t* field, uint32_t* wire) {
    uint64_t key = 0;
    if (!varint(&key)) return false;
    *field = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<uint32_t>(key & 7);
    return true;
  }
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return fail();
      const uint8_t b = static_cast<uint8_t>(*p_++);
      *v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return true;
    }
    return fail();
  }
  bool skip(uint32_t wire) {
    uint64_t n = 0;
    switch (wire) {
      case kVarint: return varint(&n);
      case kFixed64: return advance(8);
      case kFixed32: return advance(4);
      case kBytes: return varint(&n) && advance(n);
      default: return fail();
    }
  }

 private:
  bool advance(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) return fail();
    p_ += n;
    return true;
  }
  bool fail() {
    ok_ = false;
    return false;
  }
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

// The step of an Event message (0 when absent, as protobuf's default); false if malformed.
bool event_step(std::string_view event, int64_t* step) {
  WireReader r(event);
  *step = 0;
  uint32_t field = 0, wire = 0;
  while (!r.done()) {
    if (!r.next(&field, &wire)) return false;
    if (field == kEventStep && wire == kVarint) {
      uint64_t v = 0;
      if (!r.varint(&v)) return false;
      *step = static_cast<int64_t>(v);
    } else if (!r.skip(wire)) {
      return false;
    }
  }
  return r.ok();
}

template <typename T>
T read_little_endian(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Splits a file's bytes into records; `records` gets each record's data, and the return value
// is false when the bytes end in a partial or corrupt record (which is not returned).
bool split_records(std::string_view bytes, std::vector<std::string_view>* records) {
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) return false;
    const uint64_t len = read_little_endian<uint64_t>(bytes.data() + at);
    if (read_little_endian<uint32_t>(bytes.data() + at + 8) != masked_crc32c(bytes.data() + at, 8)) return false;
    if (len > bytes.size() - at - 16) return false;
    const std::string_view data = bytes.substr(at + 12, len);
    if (read_little_endian<uint32_t>(bytes.data() + at + 12 + len) != masked_crc32c(data.data(), data.size()))
      return false;
    records->push_back(data);
    at += 16 + len;
  }
  return true;
}

constexpr std::string_view kPrefix = "events.out.tfevents.";
constexpr std::string_view kSuffix = ".tarn";

bool is_tarn_event_file(const std::string& name) {
  return name.size() > kPrefix.size() + kSuffix.size() && name.compare(0, kPrefix.size(), kPrefix) == 0 &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_little_endian<uint64_t>(r, data.size());
  put_little_endian<uint32_t>(r, masked_crc32c(r.data(), 8));
  r.append(data);
  put_little_endian<uint32_t>(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::string event_file_version(double wall_time) {
  std::string e = event_header(wall_time);
  put_bytes(e, kEventFileVersion, "brain.Event:2");
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, kValueTag, tag);
    put_key(v, kValueSimpleValue, kFixed32);
    put_little_endian(v, static_cast<float>(value));  // simple_value is a float in summary.proto
    put_bytes(summary, kSummaryValue, v);
  }
  std::string e = event_header(wall_time);
  put_key(e, kEventStep, kVarint);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, kEventSummary, summary);
  return e;
}

std::vector<std::string> list_event_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && is_tarn_event_file(name)) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<EventFileRewind> rewind_event_files(const std::string& dir, int64_t last_kept_step) {
  std::vector<EventFileRewind> changed;
  for (const std::string& path : list_event_files(dir)) {
    const std::string bytes = read_file(path);
    std::vector<std::string_view> records;
    EventFileRewind r;
    r.path = path;
    r.damaged_tail = !split_records(bytes, &records);
    std::string kept;
    for (std::string_view rec : records) {
      int64_t step = 0;
      if (!event_step(rec, &step)) {  // a record whose CRC holds but whose message does not parse
        r.damaged_tail = true;
        break;
      }
      if (step > last_kept_step) {
        ++r.dropped;
        continue;
      }
      ++r.kept;
      kept += tfrecord(rec);
    }
    if (r.dropped == 0 && !r.damaged_tail) continue;
    write_file_atomic(path, kept);
    changed.push_back(r);
  }
  return changed;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t start_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TARN_CHECK(!ec, dir, ": cannot create the TensorBoard folder: ", ec.message());
  rewound_ = rewind_event_files(dir, start_step);
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  const double now = now_seconds();
  std::string name = str_cat(kPrefix, static_cast<long long>(now), ".", host, ".", getpid());
  // Two writers in one second from one process (a test, a restart in-process) get two files.
  std::string path = (fs::path(dir) / (name + std::string(kSuffix))).string();
  for (int k = 2; fs::exists(path); ++k) path = (fs::path(dir) / str_cat(name, "_", k, kSuffix)).string();
  out_ = FileWriter(path);
  out_.write(tfrecord(event_file_version(now)));
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  out_.write(tfrecord(event_scalars(now_seconds(), step, values)));
}

}  // namespace tarn
