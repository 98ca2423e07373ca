#pragma once
// Fibers for the emulator: one small stack per emulated CUDA thread (mmap'd, with an
// inaccessible guard page below it so that an overflow faults instead of corrupting the
// neighbour) and a hand-written x86-64 context switch that saves only what the System V ABI
// asks a callee to keep (rbx, rbp, r12-r15, rsp, MXCSR, the x87 control word). ucontext would
// also save the signal mask: a syscall per switch, about 20x slower.
#include <cstddef>

#if !defined(__x86_64__)
#error "the CUDA emulator's context switch (kernels/emu/fiber.cpp) is written for x86-64 System V"
#endif

namespace tarn::emu {

class FiberStack {
 public:
  explicit FiberStack(size_t bytes);  // usable bytes, rounded up to whole pages
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;

  char* bottom() const { return usable_; }  // lowest usable address (the guard page is below)
  char* top() const { return usable_ + size_; }
  size_t size() const { return size_; }

 private:
  char* map_ = nullptr;
  size_t map_bytes_ = 0;
  char* usable_ = nullptr;
  size_t size_ = 0;
};

// Lays out `stack` so that the first switch to the returned stack pointer calls entry(arg)
// there. `entry` must never return: it ends by switching away for good.
void* fiber_prepare(const FiberStack& stack, void (*entry)(void*), void* arg);

}  // namespace tarn::emu

// Saves the running context's callee-saved state on its stack, stores that stack pointer in
// *save_sp, and resumes the context whose stack pointer is to_sp.
extern "C" void tarn_emu_switch(void** save_sp, void* to_sp);
