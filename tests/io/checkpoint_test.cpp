// Atomic files and checkpoint folders: whatever stops a writer, the previous checkpoint stays
// loadable; damage is reported naming the checkpoint, the file and what is wrong.
#include "framework/io/checkpoint_dir.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "framework/io/crc32.h"
#include "framework/io/json.h"
#include "tests/io/io_test_util.h"

namespace tarn {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

Tensor ramp(int64_t n, float start) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_vector(v, {n});
}

// A small checkpoint: weights whose first value is `step`, plus a trainer state file.
void write_checkpoint(const std::string& run, int64_t step, int64_t n = 1000) {
  CheckpointWriter w(checkpoint_dir(run, step));
  w.write_safetensors("model.safetensors", {{"w", ramp(n, static_cast<float>(step))}}, {{"step", std::to_string(step)}});
  w.write_file("trainer_state.json", "{\"step\": " + std::to_string(step) + "}\n");
  w.set_info("step", std::to_string(step));
  w.commit();
}

float first_weight(const Checkpoint& ck) {
  return load_safetensors(ck.path("model.safetensors")).at("w").to_vector()[0];
}

std::vector<int64_t> steps_of(const std::vector<CheckpointEntry>& list) {
  std::vector<int64_t> s;
  for (const auto& e : list) s.push_back(e.step);
  return s;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Kills a forked child if the test leaves early (a failed ASSERT), so it never outlives the test.
struct KillOnExit {
  pid_t pid;
  ~KillOnExit() {
    if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
  }
};

// ---------------------------------------------------------------------------------------------
// AtomicFile

TEST(AtomicFile, CommitReplacesAndAbandonLeavesTheOldFile) {
  ScratchDir dir;
  const std::string path = dir / "state.json";
  write_file_atomic(path, "old");
  {
    AtomicFile f(path);
    f.write("new, half-written");
    EXPECT_TRUE(fs::exists(f.temp_path()));
    EXPECT_EQ(f.temp_path(), path + ".tmp." + std::to_string(::getpid()));
    // Destroyed without commit: an exception in the middle of a save.
  }
  EXPECT_EQ(testing::read_bytes(path), "old");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"state.json"});
  write_file_atomic(path, "new");
  EXPECT_EQ(testing::read_bytes(path), "new");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"state.json"});
}

TEST(AtomicFile, WriterTracksBytesAndCrc) {
  ScratchDir dir;
  FileWriter w(dir / "f");
  w.write("12345");
  w.write("6789");
  EXPECT_EQ(w.bytes_written(), 9u);
  EXPECT_EQ(w.crc32(), 0xCBF43926u);
  w.sync();
  w.close();
  EXPECT_ERROR_CONTAINS(w.write("x"), "write after close");
  EXPECT_ERROR_CONTAINS(FileWriter(dir / "no/such/dir/f"), "no/such/dir/f: cannot create: No such file or directory");
  EXPECT_ERROR_CONTAINS(read_file(dir / "missing"), "missing: cannot open");
  EXPECT_EQ(with_commas(0), "0");
  EXPECT_EQ(with_commas(999), "999");
  EXPECT_EQ(with_commas(4096), "4,096");
  EXPECT_EQ(with_commas(37748736), "37,748,736");
}

TEST(AtomicFile, ChildKilledDuringALargeWriteLeavesTheOldFileIntact) {
  ScratchDir dir;
  const std::string path = dir / "big.bin";
  write_file_atomic(path, "previous contents");
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  KillOnExit guard{child};
  if (child == 0) {
    ::close(pipefd[0]);
    try {
      AtomicFile f(path);
      std::string chunk(1 << 20, 'x');
      f.write(chunk);
      const char c = 's';
      if (::write(pipefd[1], &c, 1) != 1) ::_exit(3);
      // A long write (bounded, in case the parent fails before killing us): killed in the middle.
      for (int i = 0; i < 4096; ++i) f.write(chunk);
      ::pause();
    } catch (...) {
      ::_exit(4);
    }
  }
  ::close(pipefd[1]);
  char c = 0;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1);
  ::close(pipefd[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  EXPECT_EQ(testing::read_bytes(path), "previous contents");
  const std::string temp = path + ".tmp." + std::to_string(child);
  ASSERT_TRUE(fs::exists(temp)) << "the killed writer's temporary";
  EXPECT_GE(fs::file_size(temp), size_t{1} << 20);
  const auto removed = remove_stale_temp_files(dir.path());
  EXPECT_EQ(removed, std::vector<std::string>{temp});
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"big.bin"});
}

TEST(AtomicFile, TemporariesOfLiveProcessesAreKept) {
  ScratchDir dir;
  testing::write_bytes(dir / ("a.tmp." + std::to_string(::getpid())), "mine");
  testing::write_bytes(dir / "b.tmp.notapid", "x");
  testing::write_bytes(dir / "c.tmp", "x");
  EXPECT_TRUE(remove_stale_temp_files(dir.path()).empty());
  EXPECT_EQ(names_in(dir.path()).size(), 3u);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint folders

TEST(Checkpoint, WriteThenOpenVerifiesEveryFile) {
  ScratchDir run;
  write_checkpoint(run.path(), 1200);
  const std::string dir = checkpoint_dir(run.path(), 1200);
  EXPECT_EQ(dir, run.path() + "/step_1200");
  EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"step_1200"});
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"COMPLETE", "MANIFEST.json", "model.safetensors",
                                                     "trainer_state.json"}));
  const Checkpoint ck = open_checkpoint(dir);
  ASSERT_EQ(ck.files.size(), 2u);
  EXPECT_EQ(ck.files[0].name, "model.safetensors");
  EXPECT_EQ(ck.files[0].bytes, fs::file_size(dir + "/model.safetensors"));
  const std::string model = testing::read_bytes(dir + "/model.safetensors");
  EXPECT_EQ(ck.files[0].crc32, crc32(model.data(), model.size()));
  EXPECT_EQ(ck.info.at("step"), "1200");
  EXPECT_EQ(first_weight(ck), 1200.0f);
  EXPECT_TRUE(ck.has("trainer_state.json"));
  EXPECT_ERROR_CONTAINS(ck.path("optimizer.safetensors"), "has no file optimizer.safetensors");
  EXPECT_NO_THROW(check_safetensors(ck.path("model.safetensors")));

  // The manifest is plain, readable JSON.
  const json::Json m = json::parse(testing::read_bytes(dir + "/MANIFEST.json"), "manifest");
  EXPECT_EQ(json::as_string(m.at("format"), ""), "tarn-checkpoint");
  EXPECT_EQ(json::as_string(json::items(m.at("files"), "")[1].at("name"), ""), "trainer_state.json");
}

TEST(Checkpoint, IndependentPythonCheckerAgrees) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  ScratchDir run;
  write_checkpoint(run.path(), 7, 100000);
  const std::string dir = checkpoint_dir(run.path(), 7);
  const std::string out = run / "out.txt";
  const std::string cmd = std::string("python3 ") + TARN_SOURCE_DIR + "/tests/io/check_safetensors.py --checkpoint " +
                          dir + " > " + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::read_bytes(out);
  EXPECT_EQ(testing::read_bytes(out).rfind("ok checkpoint model.safetensors:", 0), 0u) << testing::read_bytes(out);
}

// fuzz/corpus/checkpoint holds the bookkeeping of a checkpoint that tarn wrote while its CRC-32
// was still its own code (checksums of MANIFEST.json, progress.json and notes.txt); with zlib's
// CRC-32 it must still verify.
TEST(Checkpoint, OneWrittenBeforeCrc32CameFromZlibStillVerifies) {
  ScratchDir run;
  const std::string seeds = std::string(TARN_SOURCE_DIR) + "/fuzz/corpus/checkpoint/";
  const std::string dir = checkpoint_dir(run.path(), 1200);
  fs::create_directories(dir);
  for (const char* name : {"MANIFEST.json", "COMPLETE", "progress.json"}) fs::copy_file(seeds + name, dir + "/" + name);
  testing::write_bytes(dir + "/notes.txt", "fuzz fixture\n");  // as fuzz/checkpoint_fuzzer.cpp writes it
  const Checkpoint ck = open_checkpoint(dir);
  ASSERT_EQ(ck.files.size(), 2u);
  EXPECT_EQ(crc32_hex(ck.files[0].crc32), "df5241f4");
  EXPECT_EQ(ck.info.at("step"), "1200");
}

TEST(Checkpoint, TruncatedFileIsReportedWithBothSizes) {
  ScratchDir run;
  write_checkpoint(run.path(), 1200, 9000);
  const std::string dir = checkpoint_dir(run.path(), 1200);
  const uint64_t full = fs::file_size(dir + "/model.safetensors");
  fs::resize_file(dir + "/model.safetensors", 4096);
  const std::string msg = testing::error_of([&] { open_checkpoint(dir); });
  EXPECT_EQ(msg, "checkpoint " + dir + ": model.safetensors is truncated (expected " + with_commas(full) +
                     " bytes, found 4,096)");
  // Sizes only (no checksums) catches it too.
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir, /*verify_checksums=*/false), "is truncated");
  // Grown files are reported as such.
  fs::resize_file(dir + "/model.safetensors", full + 3);
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir), "model.safetensors is larger than recorded (expected " +
                                                  with_commas(full) + " bytes, found " + with_commas(full + 3) + ")");
}

TEST(Checkpoint, FlippedByteIsReportedAsCorrupted) {
  ScratchDir run;
  write_checkpoint(run.path(), 5);
  const std::string dir = checkpoint_dir(run.path(), 5);
  std::string bytes = testing::read_bytes(dir + "/model.safetensors");
  bytes[bytes.size() / 2] ^= 0x10;  // one bit of a weight: the safetensors structure stays valid
  testing::write_bytes(dir + "/model.safetensors", bytes);
  EXPECT_NO_THROW(load_safetensors(dir + "/model.safetensors"));
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir), "checkpoint " + dir + ": model.safetensors is corrupted (CRC-32 ");
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir), "MANIFEST.json records ");
  EXPECT_NO_THROW(open_checkpoint(dir, /*verify_checksums=*/false));  // same size: only the CRC sees it
}

TEST(Checkpoint, DamagedBookkeepingIsReported) {
  ScratchDir run;
  write_checkpoint(run.path(), 5);
  const std::string dir = checkpoint_dir(run.path(), 5);
  const std::string manifest = testing::read_bytes(dir + "/MANIFEST.json");
  // Missing file.
  fs::rename(dir + "/trainer_state.json", run / "moved");
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir), "checkpoint " + dir + ": trainer_state.json is missing");
  fs::rename(run / "moved", dir + "/trainer_state.json");
  // Manifest edited (same length, different content).
  std::string edited = manifest;
  edited[edited.find("trainer")] = 'T';
  testing::write_bytes(dir + "/MANIFEST.json", edited);
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir), "MANIFEST.json is corrupted (CRC-32 ");
  // Manifest truncated.
  testing::write_bytes(dir + "/MANIFEST.json", manifest.substr(0, 20));
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir), "MANIFEST.json is truncated (expected ");
  testing::write_bytes(dir + "/MANIFEST.json", manifest);
  EXPECT_NO_THROW(open_checkpoint(dir));
  // No marker: incomplete.
  fs::remove(dir + "/COMPLETE");
  EXPECT_ERROR_CONTAINS(open_checkpoint(dir), "checkpoint " + dir + ": incomplete (no COMPLETE marker");
  EXPECT_TRUE(list_checkpoints(run.path()).empty());
  EXPECT_ERROR_CONTAINS(open_checkpoint(run / "step_99"), "step_99: no such folder");
}

TEST(Checkpoint, WriterStoppedByAnExceptionLeavesNoTrace) {
  ScratchDir run;
  write_checkpoint(run.path(), 1);
  try {
    CheckpointWriter w(checkpoint_dir(run.path(), 2));
    w.write_file("a.txt", "partial");
    throw std::runtime_error("disk full, say");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"step_1"});
  EXPECT_EQ(steps_of(list_checkpoints(run.path())), std::vector<int64_t>{1});
}

TEST(Checkpoint, WriterRejectsBadFileNames) {
  ScratchDir run;
  CheckpointWriter w(run / "step_1");
  EXPECT_ERROR_CONTAINS(w.write_file("a/b", ""), "\"a/b\" is not a plain file name");
  EXPECT_ERROR_CONTAINS(w.write_file("..", ""), "is not a plain file name");
  EXPECT_ERROR_CONTAINS(w.write_file("COMPLETE", ""), "COMPLETE is reserved");
  EXPECT_ERROR_CONTAINS(w.write_file("MANIFEST.json", ""), "MANIFEST.json is reserved");
  w.write_file("x", "1");
  EXPECT_ERROR_CONTAINS(w.write_file("x", "2"), "x written twice");
  EXPECT_ERROR_CONTAINS(CheckpointWriter(run / "no/step_1"), "does not exist");
}

TEST(Checkpoint, LeftoversOfKilledWritersAreIgnoredThenCleanedUp) {
  ScratchDir run;
  write_checkpoint(run.path(), 100);
  // Killed while writing step 200: its temporary folder, with a truncated file inside.
  fs::create_directory(run / "step_200.tmp");
  testing::write_bytes(run / "step_200.tmp/model.safetensors", std::string(100, 'x'));
  // Killed between the rename and the marker of step 150 (an older step, say after a restart).
  write_checkpoint(run.path(), 150);
  fs::remove(run / "step_150/COMPLETE");
  // Killed while pointing `best` somewhere: a symlink temporary of a dead process.
  fs::create_symlink("step_100", run / "best.tmp.999999999");

  EXPECT_EQ(steps_of(list_checkpoints(run.path())), std::vector<int64_t>{100});
  const auto latest = latest_valid_checkpoint(run.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(first_weight(*latest), 100.0f);

  const auto done = cleanup_incomplete_checkpoints(run.path());
  EXPECT_EQ(done.size(), 2u);
  EXPECT_EQ(names_in(run.path()), (std::vector<std::string>{"step_100", "step_150"}));
  // A new writer for the same step replaces the markerless folder.
  write_checkpoint(run.path(), 150);
  EXPECT_EQ(steps_of(list_checkpoints(run.path())), (std::vector<int64_t>{100, 150}));
  EXPECT_EQ(first_weight(open_checkpoint(run / "step_150")), 150.0f);
}

TEST(Checkpoint, ChildKilledDuringALargeCheckpointWriteLeavesThePreviousOneLoadable) {
  ScratchDir run;
  write_checkpoint(run.path(), 1);
  constexpr int64_t kTensors = 16, kFloats = int64_t{1} << 21;  // 16 x 8 MiB = 128 MiB
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  KillOnExit guard{child};
  if (child == 0) {
    // No OpenMP or other threads here (fork copies only this thread): raw tensors, raw writes.
    ::close(pipefd[0]);
    try {
      TensorList big;
      for (int64_t i = 0; i < kTensors; ++i) {
        Tensor t = Tensor::empty({kFloats});
        std::memset(t.data<char>(), static_cast<int>(i), t.nbytes());
        big.emplace_back("layer." + std::to_string(i), t);
      }
      CheckpointWriter w(checkpoint_dir(run.path(), 2));
      w.write_file("trainer_state.json", "{}");
      const char c = 's';
      if (::write(pipefd[1], &c, 1) != 1) ::_exit(3);
      w.write_safetensors("model.safetensors", big);
      ::pause();  // never commit: if the write finished before the kill, we still die uncommitted
    } catch (...) {
      ::_exit(4);
    }
    ::_exit(0);
  }
  ::close(pipefd[1]);
  char c = 0;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1);
  // Kill once the big file has started to grow.
  const std::string partial = run / "step_2.tmp/model.safetensors";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (fs::file_size(partial, ec) > (uint64_t{1} << 20) && !ec) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ::close(pipefd[0]);

  const uint64_t full = kTensors * kFloats * 4;
  const uint64_t written = fs::file_size(partial);
  EXPECT_GT(written, 0u);
  EXPECT_LT(written, full) << "the child finished writing before the kill; the test did not interrupt it";
  EXPECT_FALSE(fs::exists(run / "step_2"));
  EXPECT_EQ(steps_of(list_checkpoints(run.path())), std::vector<int64_t>{1});
  std::vector<std::string> rejected;
  const auto latest = latest_valid_checkpoint(run.path(), &rejected);
  ASSERT_TRUE(latest.has_value());
  EXPECT_TRUE(rejected.empty());
  EXPECT_EQ(first_weight(*latest), 1.0f);

  cleanup_incomplete_checkpoints(run.path());
  EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"step_1"});
  write_checkpoint(run.path(), 2);  // and the run goes on
  EXPECT_EQ(steps_of(list_checkpoints(run.path())), (std::vector<int64_t>{1, 2}));
}

TEST(Checkpoint, LatestValidFallsBackPastADamagedNewestCheckpoint) {
  ScratchDir run;
  write_checkpoint(run.path(), 10);
  write_checkpoint(run.path(), 20);
  fs::resize_file(run / "step_20/model.safetensors", 10);
  std::vector<std::string> rejected;
  const auto latest = latest_valid_checkpoint(run.path(), &rejected);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->dir, run / "step_10");
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find("step_20: model.safetensors is truncated"), std::string::npos) << rejected[0];
  ScratchDir empty;
  EXPECT_FALSE(latest_valid_checkpoint(empty.path()).has_value());
}

TEST(Checkpoint, ResavingAStepReplacesIt) {
  ScratchDir run;
  write_checkpoint(run.path(), 3);
  CheckpointWriter w(checkpoint_dir(run.path(), 3));
  w.write_safetensors("model.safetensors", {{"w", ramp(4, 33.0f)}});
  w.commit();
  const Checkpoint ck = open_checkpoint(run / "step_3");
  EXPECT_EQ(ck.files.size(), 1u);
  EXPECT_EQ(first_weight(ck), 33.0f);
  EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"step_3"});
}

TEST(Checkpoint, ReplacedCheckpointIsRestoredWhenItsReplacementNeverArrived) {
  ScratchDir run;
  write_checkpoint(run.path(), 3);
  // A re-save killed after moving the old folder aside and before renaming the new one in.
  fs::rename(run / "step_3", run / "step_3.old.tmp");
  fs::create_directory(run / "step_3.tmp");
  EXPECT_TRUE(list_checkpoints(run.path()).empty());
  const auto done = cleanup_incomplete_checkpoints(run.path());
  EXPECT_EQ(done.front(), "restored " + run / "step_3");
  EXPECT_EQ(names_in(run.path()), std::vector<std::string>{"step_3"});
  EXPECT_EQ(first_weight(open_checkpoint(run / "step_3")), 3.0f);
}

TEST(Checkpoint, PruningKeepsTheLastKAndTheBest) {
  ScratchDir run;
  for (int64_t step : {100, 200, 300, 400, 500}) write_checkpoint(run.path(), step);
  set_best_checkpoint(run.path(), 200);
  EXPECT_TRUE(fs::is_symlink(run / "best"));
  EXPECT_EQ(fs::read_symlink(run / "best").string(), "step_200");  // relative: the run folder can move
  EXPECT_EQ(best_checkpoint_step(run.path()), std::optional<int64_t>(200));
  // An incomplete older folder goes too; a newer incomplete one (being written) stays.
  write_checkpoint(run.path(), 250);
  fs::remove(run / "step_250/COMPLETE");
  write_checkpoint(run.path(), 600);
  fs::remove(run / "step_600/COMPLETE");

  const auto removed = prune_checkpoints(run.path(), 2);
  EXPECT_EQ(removed.size(), 3u);  // 100, 300, 250
  EXPECT_EQ(steps_of(list_checkpoints(run.path())), (std::vector<int64_t>{200, 400, 500}));
  EXPECT_EQ(names_in(run.path()), (std::vector<std::string>{"best", "step_200", "step_400", "step_500", "step_600"}));
  EXPECT_EQ(first_weight(open_checkpoint(run / "best")), 200.0f);

  // Moving best releases the old one at the next prune.
  set_best_checkpoint(run.path(), 500);
  EXPECT_EQ(best_checkpoint_step(run.path()), std::optional<int64_t>(500));
  prune_checkpoints(run.path(), 1);
  EXPECT_EQ(steps_of(list_checkpoints(run.path())), std::vector<int64_t>{500});
  EXPECT_ERROR_CONTAINS(prune_checkpoints(run.path(), 0), "keep_last must be at least 1");
  EXPECT_ERROR_CONTAINS(set_best_checkpoint(run.path(), 100), "step_100 is not a complete checkpoint");
}

TEST(Checkpoint, BestAsACopyNamesItsSourceStep) {
  // Where symlinks fail, `best` is a checkpoint copy whose manifest says where it came from.
  ScratchDir run;
  write_checkpoint(run.path(), 7);
  CheckpointWriter w(run / "best");
  w.write_file("model.safetensors", testing::read_bytes(run / "step_7/model.safetensors"));
  w.set_info("copied_from", "step_7");
  w.commit();
  EXPECT_EQ(best_checkpoint_step(run.path()), std::optional<int64_t>(7));
  EXPECT_EQ(first_weight(open_checkpoint(run / "best")), 7.0f);
  // Replacing the copy by a symlink.
  write_checkpoint(run.path(), 8);
  set_best_checkpoint(run.path(), 8);
  EXPECT_TRUE(fs::is_symlink(run / "best"));
  EXPECT_EQ(best_checkpoint_step(run.path()), std::optional<int64_t>(8));
  EXPECT_EQ(names_in(run.path()), (std::vector<std::string>{"best", "step_7", "step_8"}));
}

TEST(Checkpoint, ListingIgnoresOtherEntries) {
  ScratchDir run;
  write_checkpoint(run.path(), 9);
  write_checkpoint(run.path(), 10);
  write_checkpoint(run.path(), 1000000);
  fs::create_directory(run / "step_x");
  fs::create_directory(run / "step_");
  fs::create_directory(run / "logs");
  testing::write_bytes(run / "step_11", "a file, not a folder");
  EXPECT_EQ(steps_of(list_checkpoints(run.path())), (std::vector<int64_t>{9, 10, 1000000}));
  EXPECT_EQ(list_checkpoints(run / "does_not_exist").size(), 0u);
}

}  // namespace
}  // namespace tarn
