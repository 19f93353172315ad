// The host execution's CUDA runtime (runtime.h): device memory from the heap, streams as
// queues of deferred work, events as positions in a stream's queue, graphs as recorded work.
#include "engine/cuda/host/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <vector>

namespace specula::cuda::host {

struct Task {
  const char* what;
  std::function<void()> work;
};

struct Graph {
  std::vector<Task> nodes;
};

struct GraphExec {
  std::shared_ptr<const std::vector<Task>> nodes;
};

struct Stream {
  std::deque<Task> pending;
  std::uint64_t enqueued = 0, completed = 0;  // tasks ever enqueued, and run
  Graph* capture = nullptr;                   // the graph being recorded, if any
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
};

struct Event {
  Stream* stream = nullptr;  // where it was last recorded
  std::uint64_t position = 0;
  std::shared_ptr<double> time_ms = std::make_shared<double>(0.0);
};

namespace {

constexpr std::size_t kDeviceMemory = std::size_t{8} << 30;
constexpr int kDefaultSharedLimit = 48 * 1024;
constexpr int kMaxSharedOptin = 227 * 1024;
constexpr std::size_t kAlignment = 256;

std::recursive_mutex g_mutex;
Stream g_legacy;
std::set<Stream*> g_streams;                       // every live non-legacy stream
std::map<const char*, std::size_t> g_device;       // device allocations: start -> bytes
std::map<const char*, std::size_t> g_pinned;       // cudaMallocHost allocations
std::size_t g_device_bytes = 0;
std::map<const void*, int> g_shared_limit;         // a kernel's dynamic shared memory attribute
cudaError_t g_sticky = cudaSuccess;                // an error of execution, returned from then on
thread_local cudaError_t t_last = cudaSuccess;

[[noreturn]] void refuse(const std::string& what) {
  std::fprintf(stderr, "specula host execution: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

Stream& resolve(cudaStream_t stream) { return stream == nullptr ? g_legacy : *stream; }

const Stream* capturing_stream() {
  for (const Stream* s : g_streams)
    if (s->capture != nullptr) return s;
  return nullptr;
}
// A call the driver refuses while any stream captures (synchronisations, synchronous copies).
void refuse_while_capturing(const char* call) {
  if (capturing_stream() != nullptr) refuse(std::string(call) + " while a stream captures a graph (the driver refuses it)");
}
// A call the driver refuses during a global or thread-local capture (allocations, frees).
void refuse_while_strict_capture(const char* call) {
  const Stream* s = capturing_stream();
  if (s != nullptr && s->capture_mode != cudaStreamCaptureModeRelaxed)
    refuse(std::string(call) + " while a stream captures a graph in global or thread-local mode (the driver refuses it)");
}

// Runs `s`'s work until `position` tasks of it have run.
void run_until(Stream& s, std::uint64_t position) {
  while (s.completed < position && !s.pending.empty()) {
    Task task = std::move(s.pending.front());
    s.pending.pop_front();
    task.work();
    ++s.completed;
  }
}
void run_all(Stream& s) { run_until(s, s.enqueued); }
// Every stream's work; the legacy stream's last (its unordered work runs after the others').
void run_everything() {
  for (Stream* s : g_streams) run_all(*s);
  run_all(g_legacy);
}

cudaError_t sync_result() { return g_sticky; }

// Device and pinned allocations: kAlignment-aligned heap blocks.
void* allocate_aligned(std::size_t bytes) {
  return ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t(kAlignment), std::nothrow);
}
void free_aligned(void* p) { ::operator delete(p, std::align_val_t(kAlignment)); }

// Copies and fills of zero bytes are valid with any pointers, as the driver's are.
void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
void fill_bytes(void* dst, int value, std::size_t bytes) {
  if (bytes > 0) std::memset(dst, value, bytes);
}

// Freed device allocations kept by size for the next cudaMalloc of that size (as a caching
// allocator would), so that tests allocating per call do not fault fresh pages each time; none
// under AddressSanitizer, which then sees every use of a freed allocation.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kCacheBytes = 0;
#else
constexpr std::size_t kCacheBytes = std::size_t{1} << 30;
#endif
std::multimap<std::size_t, void*> g_cache;
std::size_t g_cached_bytes = 0;

void* take_cached(std::size_t bytes) {
  const auto it = g_cache.find(bytes);
  if (it == g_cache.end()) return nullptr;
  void* p = it->second;
  g_cache.erase(it);
  g_cached_bytes -= bytes;
  return p;
}
void cache_freed(void* p, std::size_t bytes) {
  if (g_cached_bytes + bytes > kCacheBytes) {
    free_aligned(p);
    return;
  }
  g_cache.emplace(bytes, p);
  g_cached_bytes += bytes;
}

bool in_range(const std::map<const char*, std::size_t>& allocations, const void* ptr, std::size_t bytes) {
  const char* p = static_cast<const char*>(ptr);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

}  // namespace

void enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  std::lock_guard lock(g_mutex);
  Stream& s = resolve(stream);
  if (s.capture != nullptr) {
    s.capture->nodes.push_back(Task{what, std::move(work)});
    return;
  }
  s.pending.push_back(Task{what, std::move(work)});
  ++s.enqueued;
}

cudaError_t set_function_attribute(const void* function, cudaFuncAttribute attr, int value) {
  std::lock_guard lock(g_mutex);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > kMaxSharedOptin)
    return t_last = cudaErrorInvalidValue;
  g_shared_limit[function] = value;
  return cudaSuccess;
}

void launch_grid(const void* function, const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                 cudaStream_t stream, std::function<void()> body) {
  std::lock_guard lock(g_mutex);
  const unsigned long long threads = static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    t_last = cudaErrorInvalidConfiguration;
    return;
  }
  const auto limit = [function] {
    const auto it = g_shared_limit.find(function);
    return static_cast<std::size_t>(it == g_shared_limit.end() ? kDefaultSharedLimit : it->second);
  };
  if (shared_bytes > limit()) {
    t_last = cudaErrorInvalidValue;
    return;
  }
  enqueue(stream, kernel, [=, body = std::move(body)] {
    if (shared_bytes > limit()) {  // the attribute was lowered after a graph recorded this launch
      std::fprintf(stderr, "specula host execution: kernel %s: %zu bytes of dynamic shared memory, the function's limit is now %zu\n",
                   kernel, shared_bytes, limit());
      g_sticky = cudaErrorLaunchFailure;
      return;
    }
    if (g_sticky != cudaSuccess) return;  // a failed context runs nothing more
    run_grid(kernel, grid, block, shared_bytes, body);
  });
}

}  // namespace specula::cuda::host

using namespace specula::cuda::host;

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  std::lock_guard lock(g_mutex);
  if (g_sticky != cudaSuccess) return g_sticky;
  return std::exchange(t_last, cudaSuccess);
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return t_last = cudaErrorInvalidValue;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "%s", "specula host execution");
  prop->totalGlobalMem = kDeviceMemory;
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : (t_last = cudaErrorInvalidValue); }

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0 || attr != cudaDevAttrMaxSharedMemoryPerBlockOptin) return t_last = cudaErrorInvalidValue;
  *value = kMaxSharedOptin;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(g_mutex);
  refuse_while_capturing("cudaDeviceSynchronize");
  run_everything();
  return sync_result();
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard lock(g_mutex);
  *total_bytes = kDeviceMemory;
  *free_bytes = kDeviceMemory - std::min(g_device_bytes, kDeviceMemory);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  std::lock_guard lock(g_mutex);
  refuse_while_strict_capture("cudaMalloc");
  *ptr = nullptr;
  if (g_device_bytes + bytes > kDeviceMemory) return t_last = cudaErrorMemoryAllocation;
  void* p = take_cached(bytes);
  if (p == nullptr) p = allocate_aligned(bytes);
  if (p == nullptr) return t_last = cudaErrorMemoryAllocation;
  fill_bytes(p, 0xff, bytes);  // what a kernel reads unwritten: NaN as f32
  g_device[static_cast<const char*>(p)] = bytes;
  g_device_bytes += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  std::lock_guard lock(g_mutex);
  if (ptr == nullptr) return cudaSuccess;
  refuse_while_strict_capture("cudaFree");
  const auto it = g_device.find(static_cast<const char*>(ptr));
  if (it == g_device.end()) return t_last = cudaErrorInvalidDevicePointer;
  run_everything();  // cudaFree waits for the device
  g_device_bytes -= it->second;
  cache_freed(ptr, it->second);
  g_device.erase(it);
  return sync_result();
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  std::lock_guard lock(g_mutex);
  refuse_while_strict_capture("cudaMallocHost");
  void* p = allocate_aligned(bytes);
  if (p == nullptr) return t_last = cudaErrorMemoryAllocation;
  g_pinned[static_cast<const char*>(p)] = bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::lock_guard lock(g_mutex);
  if (ptr == nullptr) return cudaSuccess;
  refuse_while_strict_capture("cudaFreeHost");
  const auto it = g_pinned.find(static_cast<const char*>(ptr));
  if (it == g_pinned.end()) return t_last = cudaErrorInvalidValue;
  run_everything();
  g_pinned.erase(it);
  free_aligned(ptr);
  return sync_result();
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lock(g_mutex);
  refuse_while_capturing("cudaMemcpy");
  if (kind == cudaMemcpyHostToDevice && !in_range(g_pinned, src, bytes)) {
    // Pageable source: read now, written to the device as legacy-stream work.
    run_all(g_legacy);
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    enqueue(nullptr, "cudaMemcpy", [dst, staged] { copy_bytes(dst, staged->data(), staged->size()); });
    return sync_result();
  }
  if (kind == cudaMemcpyDeviceToDevice) {
    enqueue(nullptr, "cudaMemcpy", [=] { copy_bytes(dst, src, bytes); });
    return sync_result();
  }
  run_all(g_legacy);
  copy_bytes(dst, src, bytes);
  return sync_result();
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  Stream& s = resolve(stream);
  if (kind == cudaMemcpyHostToDevice && !in_range(g_pinned, src, bytes)) {
    if (s.capture != nullptr) refuse("cudaMemcpyAsync from pageable memory while the stream captures a graph");
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    enqueue(stream, "cudaMemcpyAsync", [dst, staged] { copy_bytes(dst, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  enqueue(stream, "cudaMemcpyAsync", [=] { copy_bytes(dst, src, bytes); });
  if (kind == cudaMemcpyDeviceToHost && !in_range(g_pinned, dst, bytes)) {
    // To pageable memory the call returns when the copy is done.
    if (s.capture != nullptr) refuse("cudaMemcpyAsync to pageable memory while the stream captures a graph");
    run_all(s);
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  std::lock_guard lock(g_mutex);
  refuse_while_capturing("cudaMemset");
  enqueue(nullptr, "cudaMemset", [=] { fill_bytes(ptr, value, bytes); });
  return sync_result();
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  enqueue(stream, "cudaMemsetAsync", [=] { fill_bytes(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  std::lock_guard lock(g_mutex);
  if (flags != cudaStreamNonBlocking)
    refuse("cudaStreamCreateWithFlags: only non-blocking streams are modelled (flags " + std::to_string(flags) + ")");
  *stream = new Stream;
  g_streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  if (stream == nullptr || !g_streams.contains(stream)) return t_last = cudaErrorInvalidResourceHandle;
  if (stream->capture != nullptr) refuse("cudaStreamDestroy of a stream that captures a graph");
  run_all(*stream);  // its work completes before its resources go
  g_streams.erase(stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  refuse_while_capturing("cudaStreamSynchronize");
  run_all(resolve(stream));
  return sync_result();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  std::lock_guard lock(g_mutex);
  if (event->stream == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  Stream* source = event->stream;
  const std::uint64_t position = event->position;
  enqueue(stream, "cudaStreamWaitEvent", [source, position] { run_until(*source, position); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new Event;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  Stream& s = resolve(stream);
  if (s.capture != nullptr) refuse("cudaEventRecord on a capturing stream is not modelled by the host execution");
  enqueue(stream, "cudaEventRecord", [time = event->time_ms] {
    *time = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  });
  event->stream = &s;
  event->position = s.enqueued;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(g_mutex);
  refuse_while_capturing("cudaEventSynchronize");
  if (event->stream != nullptr) run_until(*event->stream, event->position);
  return sync_result();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  std::lock_guard lock(g_mutex);
  *ms = static_cast<float>(*stop->time_ms - *start->time_ms);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  std::lock_guard lock(g_mutex);
  if (stream == nullptr) return t_last = cudaErrorStreamCaptureUnsupported;
  if (stream->capture != nullptr) return t_last = cudaErrorInvalidValue;
  stream->capture = new Graph;
  stream->capture_mode = mode;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard lock(g_mutex);
  if (stream == nullptr || stream->capture == nullptr) return t_last = cudaErrorInvalidValue;
  *graph = std::exchange(stream->capture, nullptr);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = new GraphExec{std::make_shared<const std::vector<Task>>(graph->nodes)};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  enqueue(stream, "cudaGraphLaunch", [nodes = exec->nodes] {
    for (const Task& node : *nodes) node.work();
  });
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
