// Host stand-ins for the CUDA runtime API under the emulator: "device" memory is host memory,
// every copy and launch is synchronous, streams and events are tokens. Errors are returned as
// cudaError_t, as the real API does, so the same checking code serves both builds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "kernels/emu/emu.h"

namespace tarn::emu {

// Work "in flight" (set_completion_polls): an event or stream answers this many more queries
// with cudaErrorNotReady. The host threads of the ranks query their own events, but the default
// stream is shared, hence atomics.
struct EmuStream {
  unsigned flags = 0;
  std::atomic<int> polls_left{0};
};
struct EmuEvent {
  std::chrono::steady_clock::time_point when{};
  std::atomic<int> polls_left{0};
};

namespace {
EmuStream legacy_stream;
}  // namespace
EmuStream* const cudaStreamLegacy = &legacy_stream;

namespace {
constexpr size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee

thread_local cudaError_t tl_last_error = cudaSuccess;
std::atomic<int> g_completion_polls{0};
std::atomic<cudaError_t> g_fault{cudaSuccess};

std::atomic<uint64_t> g_copies_to_host{0}, g_copies_to_device{0}, g_synchronizations{0}, g_async_copies_to_device{0};

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

EmuStream* resolve(cudaStream_t s) { return s ? s : &legacy_stream; }

// One query of work that completes after `polls_left` more: cudaErrorNotReady until then.
cudaError_t query(std::atomic<int>& polls_left) {
  int left = polls_left.load();
  while (left > 0 && !polls_left.compare_exchange_weak(left, left - 1)) {
  }
  return left > 0 ? record(cudaErrorNotReady) : cudaSuccess;
}

// The sticky fault as every runtime call reports it, or cudaSuccess.
cudaError_t faulted() {
  const cudaError_t f = g_fault.load();
  return f == cudaSuccess ? f : record(f);
}

struct FuncAttributes {
  std::mutex mu;
  std::map<const void*, size_t> max_dynamic_shared;
};
FuncAttributes& func_attributes() {
  static FuncAttributes a;
  return a;
}
}  // namespace

size_t kernel_shared_limit(const void* kernel) {
  FuncAttributes& a = func_attributes();
  std::lock_guard<std::mutex> lock(a.mu);
  const auto it = a.max_dynamic_shared.find(kernel);
  return it == a.max_dynamic_shared.end() ? 0 : it->second;
}

namespace {
// The emulated device's memory: a capacity (set_device_memory) and the live cudaMalloc blocks,
// so that cudaMemGetInfo answers and an allocation past the capacity fails as on hardware.
struct DeviceMemory {
  std::mutex mu;
  std::unordered_map<void*, size_t> blocks;
  size_t live = 0;
  size_t capacity = size_t{80} << 30;  // an 80 GB H100
};
DeviceMemory& device_memory_state() {
  static DeviceMemory m;
  return m;
}

void* host_block(size_t bytes) {
  const size_t rounded = (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  return std::aligned_alloc(kDeviceAlignment, rounded == 0 ? kDeviceAlignment : rounded);
}

// The live cudaMallocHost blocks (start -> bytes): an asynchronous copy from inside one does
// not make the host wait (HostWaits::async_copies_to_device).
struct PinnedMemory {
  std::mutex mu;
  std::map<const char*, size_t> blocks;
  bool holds(const void* p) {
    const char* c = static_cast<const char*>(p);
    std::lock_guard<std::mutex> lock(mu);
    auto it = blocks.upper_bound(c);
    if (it == blocks.begin()) return false;
    --it;
    return c < it->first + it->second;
  }
};
PinnedMemory& pinned_memory() {
  static PinnedMemory m;
  return m;
}
}  // namespace

HostWaits host_waits() {
  return HostWaits{g_copies_to_host.load(), g_copies_to_device.load(), g_synchronizations.load(),
                   g_async_copies_to_device.load()};
}

void reset_host_waits() {
  g_copies_to_host = 0;
  g_copies_to_device = 0;
  g_synchronizations = 0;
  g_async_copies_to_device = 0;
}

void set_completion_polls(int n) { g_completion_polls = n < 0 ? 0 : n; }
int completion_polls() { return g_completion_polls; }

void fault_device(cudaError_t error) {
  g_fault = error;
  record(error);
}
cudaError_t device_fault() { return g_fault.load(); }

void set_device_memory(size_t bytes) {
  DeviceMemory& m = device_memory_state();
  std::lock_guard<std::mutex> lock(m.mu);
  m.capacity = bytes;
}

size_t device_memory() {
  DeviceMemory& m = device_memory_state();
  std::lock_guard<std::mutex> lock(m.mu);
  return m.capacity;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (const cudaError_t f = faulted()) return f;
  if (!ptr) return record(cudaErrorInvalidValue);
  DeviceMemory& m = device_memory_state();
  std::lock_guard<std::mutex> lock(m.mu);
  *ptr = nullptr;
  if (bytes > m.capacity - std::min(m.live, m.capacity)) return record(cudaErrorMemoryAllocation);
  *ptr = host_block(bytes);
  if (!*ptr) return record(cudaErrorMemoryAllocation);
  m.blocks[*ptr] = bytes;
  m.live += bytes;
  return cudaSuccess;
}

namespace {
cudaError_t free_block(void* ptr) {
  if (!ptr) return faulted();
  DeviceMemory& m = device_memory_state();
  std::lock_guard<std::mutex> lock(m.mu);
  const auto it = m.blocks.find(ptr);
  if (it == m.blocks.end()) return record(cudaErrorInvalidValue);
  m.live -= it->second;
  m.blocks.erase(it);
  std::free(ptr);
  return faulted();
}
}  // namespace

cudaError_t cudaFree(void* ptr) {
  g_synchronizations.fetch_add(1);
  return free_block(ptr);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (const cudaError_t f = faulted()) return f;
  if (!free_bytes || !total_bytes) return record(cudaErrorInvalidValue);
  DeviceMemory& m = device_memory_state();
  std::lock_guard<std::mutex> lock(m.mu);
  *total_bytes = m.capacity;
  *free_bytes = m.capacity - std::min(m.live, m.capacity);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) { return cudaMalloc(ptr, bytes); }
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return free_block(ptr); }

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {  // pinned host memory: not the device's
  if (const cudaError_t f = faulted()) return f;
  if (!ptr) return record(cudaErrorInvalidValue);
  *ptr = host_block(bytes);
  if (!*ptr) return record(cudaErrorMemoryAllocation);
  PinnedMemory& pinned = pinned_memory();
  std::lock_guard<std::mutex> lock(pinned.mu);
  pinned.blocks[static_cast<const char*>(*ptr)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  {
    PinnedMemory& pinned = pinned_memory();
    std::lock_guard<std::mutex> lock(pinned.mu);
    pinned.blocks.erase(static_cast<const char*>(ptr));
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t f = faulted()) return f;
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src || kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return record(cudaErrorInvalidValue);
  if (kind == cudaMemcpyDeviceToHost) g_copies_to_host.fetch_add(1);
  if (kind == cudaMemcpyHostToDevice) g_copies_to_device.fetch_add(1);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  if (kind == cudaMemcpyHostToDevice && bytes > 0 && src && dst && !faulted() && pinned_memory().holds(src)) {
    g_async_copies_to_device.fetch_add(1);
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (const cudaError_t f = faulted()) return f;
  if (bytes == 0) return cudaSuccess;
  if (!dst) return record(cudaErrorInvalidValue);
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) { return cudaMemset(dst, value, bytes); }

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  if (const cudaError_t f = faulted()) return f;
  if (!s) return record(cudaErrorInvalidValue);
  *s = new EmuStream{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s != &legacy_stream) delete s;
  return faulted();
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  g_synchronizations.fetch_add(1);
  if (const cudaError_t f = faulted()) return f;
  resolve(s)->polls_left = 0;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  if (const cudaError_t f = faulted()) return f;
  return query(resolve(s)->polls_left);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  if (const cudaError_t f = faulted()) return f;
  return e ? cudaSuccess : record(cudaErrorInvalidValue);
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  if (const cudaError_t f = faulted()) return f;
  if (!e) return record(cudaErrorInvalidValue);
  *e = new EmuEvent{};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return faulted();
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (const cudaError_t f = faulted()) return f;
  if (!e) return record(cudaErrorInvalidValue);
  e->when = std::chrono::steady_clock::now();
  e->polls_left = g_completion_polls.load();
  resolve(s)->polls_left = g_completion_polls.load();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (const cudaError_t f = faulted()) return f;
  if (!e) return record(cudaErrorInvalidValue);
  return query(e->polls_left);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  g_synchronizations.fetch_add(1);
  if (const cudaError_t f = faulted()) return f;
  if (!e) return record(cudaErrorInvalidValue);
  e->polls_left = 0;
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (const cudaError_t f = faulted()) return f;
  if (!ms || !start || !end) return record(cudaErrorInvalidValue);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

// Completes the default stream's work; events and other streams keep their own count (they
// are few, and tests synchronize what they query).
cudaError_t cudaDeviceSynchronize() {
  g_synchronizations.fetch_add(1);
  if (const cudaError_t f = faulted()) return f;
  legacy_stream.polls_left = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceReset() {
  g_fault = cudaSuccess;
  tl_last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* n) {
  if (const cudaError_t f = faulted()) return f;
  if (!n) return record(cudaErrorInvalidValue);
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  if (const cudaError_t f = faulted()) return f;
  if (!d) return record(cudaErrorInvalidValue);
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : record(cudaErrorInvalidDevice); }

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (const cudaError_t f = faulted()) return f;
  if (!value || device != 0) return record(cudaErrorInvalidValue);
  switch (attr) {  // an H100-like device
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; break;
    default: return record(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  if (const cudaError_t f = faulted()) return f;
  const cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  if (const cudaError_t f = faulted()) return f;
  return tl_last_error;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  }
  return "unknown error";
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
  }
  return "cudaErrorUnknown";
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (const cudaError_t f = faulted()) return f;
  if (!func || value < 0) return record(cudaErrorInvalidValue);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value > 227 * 1024) return record(cudaErrorInvalidValue);
    FuncAttributes& a = func_attributes();
    std::lock_guard<std::mutex> lock(a.mu);
    a.max_dynamic_shared[func] = static_cast<size_t>(value);
  }
  return cudaSuccess;
}

}  // namespace tarn::emu
