#include "data/length_limits.h"

#include "kernels/check.h"

namespace tarn {
namespace {

// A source or target must hold </s> and at least one text token.
constexpr int64_t kMinLength = 2;

}  // namespace

void LengthLimits::validate() const {
  const int64_t least = kMinLength + (bos ? 1 : 0);  // a token, </s> and <s> when data.bos
  TARN_CHECK(max_source_length >= least, "data.max_source_length: expected at least ", least, ", got ",
             max_source_length);
  TARN_CHECK(max_target_length >= least, "data.max_target_length: expected at least ", least, ", got ",
             max_target_length);
}

}  // namespace tarn
