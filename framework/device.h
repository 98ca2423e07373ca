#pragma once
#include <cstdint>
#include <string>

namespace tarn {

enum class DType : uint8_t { f32, bf16, f16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  std::string str() const;
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace tarn
