#pragma once
// UTF-8 validation: corpus lines (SentencePiece would otherwise silently map broken bytes to
// <unk> or abort training, so readers skip such lines and count them), JSON text before it is
// parsed (framework/io/json.cpp), and the names a safetensors file or checkpoint stores.
#include <cstddef>
#include <string_view>

namespace tarn {

// Byte offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or text.size() when the whole text is valid.
size_t first_invalid_utf8(std::string_view text);

inline bool is_valid_utf8(std::string_view text) { return first_invalid_utf8(text) == text.size(); }

}  // namespace tarn
