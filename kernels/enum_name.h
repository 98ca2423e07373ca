#pragma once
// The name of an enum value from a table of names in the enum's order, for the enums whose
// values run 0, 1, 2, ... (DType, the emulator's ThreadOrder, ...): one line per enum instead
// of a switch each. A value past the table, which only a bad cast can make, is named "?".
#include <cstddef>

namespace tarn {

template <typename Enum, size_t N>
const char* enum_name(Enum value, const char* const (&names)[N]) {
  const auto i = static_cast<size_t>(value);
  return i < N ? names[i] : "?";
}

}  // namespace tarn
