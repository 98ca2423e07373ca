#pragma once
// Error reporting shared by every layer: TARN_CHECK(cond, parts...) throws tarn::Error whose
// message is the streamed parts. Lives in kernels/ because that is the lowest layer.
#include <sstream>
#include <stdexcept>
#include <string>

namespace tarn {

// A user-facing error: the message names the offending input (op, shape, file, key).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
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
