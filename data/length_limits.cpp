#include "data/length_limits.h"

#include "kernels/check.h"

namespace tarn {
namespace {

// A source or target must hold </s> and at least one text token.
constexpr int64_t kMinLength = 2;

}  // namespace

void LengthLimits::validate() const {
  TARN_CHECK(max_source_length >= kMinLength, "data.max_source_length: expected at least ", kMinLength, ", got ",
             max_source_length);
  TARN_CHECK(max_target_length >= kMinLength, "data.max_target_length: expected at least ", kMinLength, ", got ",
             max_target_length);
}

}  // namespace tarn
