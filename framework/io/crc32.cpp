#include "framework/io/crc32.h"

#include <zlib.h>

namespace tarn {

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  // crc32_z takes a size_t length (zlib's crc32 a 32-bit one: files beyond 4 GiB would wrap).
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string crc32_hex(uint32_t crc) {
  static const char* hex = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) s[i] = hex[crc & 15];
  return s;
}

}  // namespace tarn
