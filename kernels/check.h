#pragma once
// Error reporting shared by every layer. Two kinds, because the command line answers them
// differently (exit 2: fix your input; exit 1: a bug in tarn, please report it):
//   TARN_CHECK(cond, parts...)  throws tarn::Error: the input was wrong (a recipe value, a
//                               file, a flag) or the machine refused (memory, a device);
//   TARN_ASSERT(cond, parts...) throws tarn::InternalError: an invariant between tarn's own
//                               parts failed (an op given mismatched shapes, a kernel bad dims).
// The message is the streamed parts. Lives in kernels/ because that is the lowest layer.
#include <sstream>
#include <stdexcept>
#include <string>

namespace tarn {

// A user-facing error: the message names the offending input (op, shape, file, key).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A broken invariant: code that uses the library wrongly. Derives from Error so that a caller
// who handles every tarn failure alike (a test, an embedding program) still catches it.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& what) : Error(what) {}
};

template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

}  // namespace tarn

#define TARN_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) throw ::tarn::Error(::tarn::str_cat(__VA_ARGS__)); \
  } while (0)

// Checks a library call that returns a status (CUDA's runtime, cuBLAS, NCCL): anything but `ok`
// throws tarn::Error "<text> failed: <reason(status)> (file:line)". `text` is the call as
// written (#call in the wrapper, so that macros in it are not expanded):
//   #define TARN_CUDA_CALL(call) TARN_CHECK_STATUS(call, #call, cudaSuccess, cudaGetErrorString)
#define TARN_CHECK_STATUS(call, text, ok, reason)                                                            \
  do {                                                                                                       \
    const auto tarn_status_ = (call);                                                                        \
    TARN_CHECK(tarn_status_ == (ok), text, " failed: ", reason(tarn_status_), " (", __FILE__, ":", __LINE__, \
               ")");                                                                                         \
  } while (0)

#define TARN_ASSERT(cond, ...)                                          \
  do {                                                                  \
    if (!(cond)) throw ::tarn::InternalError(::tarn::str_cat(__VA_ARGS__)); \
  } while (0)
