#pragma once
// CRC-32 as zlib, gzip and PNG compute it (IEEE 802.3 polynomial, reflected, init and final
// xor 0xFFFFFFFF), so a checkpoint's MANIFEST.json can be checked with `python3 -c
// "import zlib; ..."` or `crc32` from libarchive-tools. It is zlib's own (crc32.cpp): about 2 GB/s
// on one core, so verifying a 400 MB checkpoint costs a fraction of a second.
#include <cstddef>
#include <cstdint>
#include <string>

namespace tarn {

// Continues a running CRC: crc32(b, nb, crc32(a, na)) == crc32(a ++ b). Start with 0.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

// Eight lower-case hex digits, as MANIFEST.json stores checksums.
std::string crc32_hex(uint32_t crc);

}  // namespace tarn
