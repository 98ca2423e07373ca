// TensorBoard event files (framework/log/tensorboard.h) read back by a reader written here from
// the TFRecord and protocol-buffer specifications, with a bit-by-bit CRC-32C of its own, so
// that the writer's framing, checksums and field numbers are checked by code that shares
// nothing with it. tests/tools/tensorboard_test.sh reads a real run's files with TensorBoard's
// own reader.
#include "framework/log/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "framework/io/atomic_file.h"
#include "kernels/check.h"

namespace tarn {
namespace {
namespace fs = std::filesystem;

// CRC-32C one bit at a time (reflected polynomial 0x82F63B78), as RFC 3720 defines it.
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> values;
};

uint64_t varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s.at(at++));
    v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return v;
  }
}

std::map<std::string, float> parse_summary(const std::string& s) {
  std::map<std::string, float> out;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = varint(s, at);
    EXPECT_EQ(key, (1u << 3) | 2u) << "Summary holds only `repeated Value value = 1`";
    const std::string value = s.substr(at, varint(s, at));
    at += value.size();
    std::string tag;
    float simple = 0;
    size_t v = 0;
    while (v < value.size()) {
      const uint64_t k = varint(value, v);
      if (k == ((1u << 3) | 2u)) {  // string tag = 1
        const uint64_t n = varint(value, v);
        tag = value.substr(v, n);
        v += n;
      } else if (k == ((2u << 3) | 5u)) {  // float simple_value = 2
        std::memcpy(&simple, value.data() + v, 4);
        v += 4;
      } else {
        ADD_FAILURE() << "unexpected Summary.Value field key " << k;
        return out;
      }
    }
    out[tag] = simple;
  }
  return out;
}

Event parse_event(const std::string& s) {
  Event e;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = varint(s, at);
    if (key == ((1u << 3) | 1u)) {  // double wall_time = 1
      std::memcpy(&e.wall_time, s.data() + at, 8);
      at += 8;
    } else if (key == ((2u << 3) | 0u)) {  // int64 step = 2
      e.step = static_cast<int64_t>(varint(s, at));
    } else if (key == ((3u << 3) | 2u)) {  // string file_version = 3
      const uint64_t n = varint(s, at);
      e.file_version = s.substr(at, n);
      at += n;
    } else if (key == ((5u << 3) | 2u)) {  // Summary summary = 5
      const uint64_t n = varint(s, at);
      e.values = parse_summary(s.substr(at, n));
      at += n;
    } else {
      ADD_FAILURE() << "unexpected Event field key " << key;
      break;
    }
  }
  return e;
}

std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    uint64_t len = 0;
    uint32_t len_crc = 0, data_crc = 0;
    std::memcpy(&len, bytes.data() + at, 8);
    std::memcpy(&len_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(len_crc, masked(crc32c_bitwise(bytes.substr(at, 8)))) << path << " record at byte " << at;
    const std::string data = bytes.substr(at + 12, len);
    std::memcpy(&data_crc, bytes.data() + at + 12 + len, 4);
    EXPECT_EQ(data_crc, masked(crc32c_bitwise(data))) << path << " record at byte " << at;
    events.push_back(parse_event(data));
    at += 16 + len;
  }
  EXPECT_EQ(at, bytes.size()) << path << " ends inside a record";
  return events;
}

class TensorBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("tarn_tb_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST(Crc32c, MatchesTheStandardCheckValueAndABitwiseReference) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // RFC 3720's check value
  const std::string s = "any bytes \x00\xff\x80 at all";
  EXPECT_EQ(crc32c(s.data(), s.size()), crc32c_bitwise(s));
  EXPECT_EQ(masked_crc32c(s.data(), s.size()), masked(crc32c_bitwise(s)));
}

TEST_F(TensorBoardTest, WritesAVersionRecordThenOneEventPerCall) {
  std::string path;
  {
    TensorBoardWriter w(dir_, 0);
    w.scalars(5, {{"train/loss", 2.5}, {"train/lr", 1e-3}});
    w.scalars(10, {{"train/loss", 2.25}});
    path = w.path();
  }
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir_));
  EXPECT_NE(fs::path(path).filename().string().find("tfevents"), std::string::npos);  // what TensorBoard lists
  const std::vector<Event> e = read_events(path);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].file_version, "brain.Event:2");
  EXPECT_GT(e[0].wall_time, 1.7e9);  // seconds since 1970, not milliseconds or a clock's own epoch
  EXPECT_EQ(e[1].step, 5);
  EXPECT_FLOAT_EQ(e[1].values.at("train/loss"), 2.5f);
  EXPECT_FLOAT_EQ(e[1].values.at("train/lr"), 1e-3f);
  EXPECT_EQ(e[2].step, 10);
  EXPECT_EQ(e[2].values.size(), 1u);
  EXPECT_GE(e[2].wall_time, e[1].wall_time);
}

TEST_F(TensorBoardTest, AResumeDropsTheEventsAfterItsStepAndAddsANewFile) {
  {
    TensorBoardWriter w(dir_, 0);
    for (int s = 10; s <= 60; s += 10) w.scalars(s, {{"train/loss", 10.0 / s}});
  }
  TensorBoardWriter resumed(dir_, 40);  // the checkpoint it resumes from was written at step 40
  ASSERT_EQ(resumed.rewound().size(), 1u);
  EXPECT_EQ(resumed.rewound()[0].dropped, 2);  // steps 50 and 60
  EXPECT_FALSE(resumed.rewound()[0].damaged_tail);
  resumed.scalars(50, {{"train/loss", 0.3}});
  const std::vector<std::string> files = list_event_files(dir_);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1], resumed.path());  // the newest sorts last, as TensorBoard reads them
  std::vector<int64_t> steps;
  for (const std::string& f : files)
    for (const Event& e : read_events(f))
      if (!e.values.empty()) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{10, 20, 30, 40, 50}));
}

TEST_F(TensorBoardTest, ADamagedLastRecordIsCutAndOtherWritersFilesAreLeftAlone) {
  std::string first;
  {
    TensorBoardWriter w(dir_, 0);
    w.scalars(1, {{"a", 1}});
    w.scalars(2, {{"a", 2}});
    first = w.path();
  }
  {  // a writer killed in the middle of a record
    std::ofstream out(first, std::ios::binary | std::ios::app);
    out << tfrecord(event_scalars(0, 3, {{"a", 3}})).substr(0, 20);
  }
  const std::string foreign = dir_ + "/events.out.tfevents.1700000000.other";
  write_file_atomic(foreign, "not ours, not touched");
  TensorBoardWriter resumed(dir_, 100);
  ASSERT_EQ(resumed.rewound().size(), 1u);
  EXPECT_TRUE(resumed.rewound()[0].damaged_tail);
  EXPECT_EQ(resumed.rewound()[0].kept, 3);  // the version record and steps 1, 2
  EXPECT_EQ(read_events(first).size(), 3u);
  EXPECT_EQ(read_file(foreign), "not ours, not touched");
  EXPECT_EQ(list_event_files(dir_).size(), 2u);  // tarn's own two
}

TEST_F(TensorBoardTest, AFolderThatCannotBeMadeIsAnErrorNamingIt) {
  write_file_atomic(dir_ + "_file", "x");
  try {
    TensorBoardWriter w(dir_ + "_file/sub", 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "_file/sub"), std::string::npos) << e.what();
  }
  fs::remove(dir_ + "_file");
}

}  // namespace
}  // namespace tarn
