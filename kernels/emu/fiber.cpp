#include "kernels/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/check.h"

// The switch. A suspended context's stack holds, from its saved stack pointer up:
//   [MXCSR, x87 CW] r15 r14 r13 r12 rbx rbp <return address>
// so resuming is "load rsp, restore, ret". endbr64 is a no-op where CET is off.
asm(R"(
  .text
  .globl tarn_emu_switch
  .hidden tarn_emu_switch
  .type tarn_emu_switch, @function
  .p2align 4
tarn_emu_switch:
  .cfi_startproc
  endbr64
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size tarn_emu_switch, .-tarn_emu_switch

  .globl tarn_emu_fiber_start
  .hidden tarn_emu_fiber_start
  .type tarn_emu_fiber_start, @function
  .p2align 4
tarn_emu_fiber_start:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size tarn_emu_fiber_start, .-tarn_emu_fiber_start
)");

extern "C" void tarn_emu_fiber_start();

// AddressSanitizer poisons the redzones around a function's locals on whatever stack it runs
// on, and unpoisons them when the function returns. A fiber's last frames never return (it
// switches away for good), so its stack keeps stale poison: a later fiber on the same stack, or
// whatever mmap hands out at that address once the stack is unmapped (a tensor, written by
// kernels/cpu/memory.cpp), was reported as a stack-buffer-underflow. Clearing the shadow when a
// stack is prepared and before it is unmapped removes those false reports.
#if defined(__SANITIZE_ADDRESS__)
#define TARN_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TARN_EMU_ASAN 1
#endif
#endif
#ifdef TARN_EMU_ASAN
#include <sanitizer/asan_interface.h>
#define TARN_EMU_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define TARN_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace tarn::emu {
namespace {
size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

FiberStack::FiberStack(size_t bytes) {
  const size_t page = page_size();
  size_ = (bytes + page - 1) / page * page;
  map_bytes_ = size_ + page;
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TARN_CHECK(p != MAP_FAILED, "tarn emulator: mmap of a ", map_bytes_, "-byte fiber stack failed: ", std::strerror(errno));
  map_ = static_cast<char*>(p);
  if (mprotect(map_, page, PROT_NONE) != 0) {
    const int err = errno;
    munmap(map_, map_bytes_);
    throw Error(str_cat("tarn emulator: mprotect of a fiber stack's guard page failed: ", std::strerror(err)));
  }
  usable_ = map_ + page;
  poisoned_from_ = usable_ + size_;  // fresh pages: no poison
}

FiberStack::~FiberStack() {
  if (!map_) return;
  TARN_EMU_UNPOISON(usable_, size_);
  munmap(map_, map_bytes_);
}

// Below the noted stack pointer: x86-64's 128-byte red zone and whatever the switch's caller
// left there, with room to spare.
constexpr size_t kBelowSwitchSlack = 4096;

void FiberStack::note_switched_away_at(const void* sp) {
#ifdef TARN_EMU_ASAN
  char* p = static_cast<char*>(const_cast<void*>(sp));
  p = p - usable_ > static_cast<ptrdiff_t>(kBelowSwitchSlack) ? p - kBelowSwitchSlack : usable_;
  if (p < usable_ || p > usable_ + size_) p = usable_;  // not on this stack: clear everything
  poisoned_from_ = std::min(poisoned_from_, p);
#else
  (void)sp;
#endif
}

void FiberStack::unpoison_used() {
  TARN_EMU_UNPOISON(poisoned_from_, static_cast<size_t>(usable_ + size_ - poisoned_from_));
  poisoned_from_ = usable_ + size_;
}

void* fiber_prepare(FiberStack& stack, void (*entry)(void*), void* arg) {
  stack.unpoison_used();  // an earlier fiber's frames never returned
  // The fiber's first instruction after `ret` is tarn_emu_fiber_start with rsp 16-byte
  // aligned, so the `call` into entry leaves it as the ABI wants at a function's start.
  uintptr_t top = reinterpret_cast<uintptr_t>(stack.top()) & ~uintptr_t{15};
  top -= 16;  // rsp after the `ret` (aligned); a little headroom above it
  auto* frame = reinterpret_cast<uint64_t*>(top) - 8;
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  frame[0] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpucw) << 32);
  frame[1] = 0;                                          // r15
  frame[2] = 0;                                          // r14
  frame[3] = reinterpret_cast<uint64_t>(entry);          // r13
  frame[4] = reinterpret_cast<uint64_t>(arg);            // r12
  frame[5] = 0;                                          // rbx
  frame[6] = 0;                                          // rbp: ends frame-pointer walks
  frame[7] = reinterpret_cast<uint64_t>(&tarn_emu_fiber_start);  // where `ret` goes
  return frame;
}

}  // namespace tarn::emu
