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

  // AddressSanitizer: a fiber that ran on this stack last switched away with its stack pointer
  // at `sp`. What lies below it was popped by returning functions, which clear their own
  // poison; frames above it never return and keep theirs (see fiber.cpp), so the next
  // fiber_prepare clears from just below the lowest such `sp` to the top, not the whole stack:
  // a 512 KiB stack's shadow cleared for each of a block's threads at every block was 80% of an
  // emulated training step's time under ASan. A no-op in other builds.
  void note_switched_away_at(const void* sp);
  // Clears the poison noted above (all of it, if the stack is new or was left unnoted).
  void unpoison_used();

 private:
  char* map_ = nullptr;
  size_t map_bytes_ = 0;
  char* usable_ = nullptr;
  size_t size_ = 0;
  char* poisoned_from_ = nullptr;  // below this the shadow is clean
};

// Lays out `stack` so that the first switch to the returned stack pointer calls entry(arg)
// there. `entry` must never return: it ends by switching away for good.
void* fiber_prepare(FiberStack& stack, void (*entry)(void*), void* arg);

}  // namespace tarn::emu

// Saves the running context's callee-saved state on its stack, stores that stack pointer in
// *save_sp, and resumes the context whose stack pointer is to_sp.
extern "C" void tarn_emu_switch(void** save_sp, void* to_sp);
