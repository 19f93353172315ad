// The host executor of CUDA kernels (executor.h): blocks in order, a block's threads as fibers
// kept across blocks and launches (thread t of every block is slot t's fiber, which runs the
// grid's body once per block and waits between blocks); each phase runs every thread until it
// waits or returns, then the waits resolve: shuffles warp by warp, else the block's barrier.
#include "engine/cuda/host/executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <boost/context/preallocated.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace specula::cuda::host {
namespace {

namespace ctx = boost::context;

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kStackBytes = 512 * 1024;
#else
constexpr std::size_t kStackBytes = 128 * 1024;
#endif
constexpr unsigned kWarp = 32;

[[noreturn]] void fail(const char* kernel, const std::string& what) {
  std::fprintf(stderr, "specula host execution: kernel %s: %s\n", kernel, what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string site(const Site& s) { return std::string(s.file) + ":" + std::to_string(s.line); }
bool same_site(const Site& a, const Site& b) {
  return a.line == b.line && (a.file == b.file || std::string_view(a.file) == b.file);
}

// A fiber stack: mapped once with a guard page below it, reused by every launch.
struct Stack {
  void* base = nullptr;  // the mapping, guard page first
  std::size_t bytes = 0;
  Stack() {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    bytes = kStackBytes + page;
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) fail("(executor)", "cannot map a fiber stack");
    if (mprotect(base, page, PROT_NONE) != 0) fail("(executor)", "cannot protect a fiber stack's guard page");
  }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack() { munmap(base, bytes); }
  void* top() const { return static_cast<char*>(base) + bytes; }
  void* bottom() const { return static_cast<char*>(base) + (bytes - kStackBytes); }
};

// The pool owns the stacks: a fiber's end frees nothing.
struct PooledStack {
  ctx::stack_context allocate() { std::abort(); }
  void deallocate(ctx::stack_context&) noexcept {}
};

enum class Wait { kRunning, kBarrier, kShuffle, kReturned };

struct DeviceThread {
  Stack stack;
  ctx::fiber fiber;  // this thread while suspended (or not yet started)
  ctx::fiber sink;   // while it runs: the scheduler it switches back to
  Wait wait = Wait::kReturned;
  Site where;
  unsigned mask = 0;
  int lane_mask = 0, width = 32;
  std::uint64_t value = 0, result = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's record of this fiber's stack while away
};

struct BlockRun {
  const char* kernel = "";
  const std::function<void()>* body = nullptr;
  std::span<DeviceThread* const> threads;  // the block's, in linear order (x fastest)
  unsigned running = 0;
  std::vector<unsigned char> shared;  // dynamic shared memory (operator new: 16-byte aligned)
};

// One grid runs at a time in the process (the runtime runs work under its lock), so the running
// thread's state is plain static data. The slots live as long as the process (never destroyed:
// their fibers stay suspended between launches).
ThreadCoordinates t_coordinates;
BlockRun* t_block = nullptr;
[[maybe_unused]] const void* t_scheduler_stack_bottom = nullptr;  // for AddressSanitizer's switches
[[maybe_unused]] std::size_t t_scheduler_stack_size = 0;
std::vector<DeviceThread*>& t_threads = *new std::vector<DeviceThread*>;

ThreadOrder order_from_environment() {
  const char* v = std::getenv("SPECULA_CUDA_HOST_ORDER");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "forward") return ThreadOrder::kForward;
  if (std::string_view(v) == "reverse") return ThreadOrder::kReverse;
  std::fprintf(stderr, "specula host execution: SPECULA_CUDA_HOST_ORDER '%s': expected forward or reverse\n", v);
  std::exit(2);
}
ThreadOrder g_order = order_from_environment();

BlockRun& current_block(const char* what) {
  if (t_block == nullptr) {
    std::fprintf(stderr, "specula host execution: %s outside a kernel\n", what);
    std::abort();
  }
  return *t_block;
}

// From the running fiber to the scheduler, and back when the scheduler resumes it.
void yield_to_scheduler(DeviceThread& self) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(&self.fake_stack, t_scheduler_stack_bottom, t_scheduler_stack_size);
#endif
  self.sink = std::move(self.sink).resume();
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(self.fake_stack, &t_scheduler_stack_bottom, &t_scheduler_stack_size);
#endif
}

void resume(BlockRun& block, unsigned t) {
  block.running = t;
  const dim3 b = t_coordinates.block_dim;
  t_coordinates.thread_index = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
  DeviceThread& thread = *block.threads[t];
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, thread.stack.bottom(), kStackBytes);
#endif
  thread.fiber = std::move(thread.fiber).resume();
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// Completes the shuffle of every group of lanes waiting at one; aborts where a named lane is
// elsewhere. Returns whether any lane was released.
bool resolve_shuffles(BlockRun& block) {
  bool released = false;
  const unsigned n = static_cast<unsigned>(block.threads.size());
  for (unsigned warp0 = 0; warp0 < n; warp0 += kWarp) {
    for (unsigned l = 0; l < kWarp && warp0 + l < n; ++l) {
      const DeviceThread& lead = *block.threads[warp0 + l];
      if (lead.wait != Wait::kShuffle) continue;
      const auto at = [&lead] { return site(lead.where); };
      if (!(lead.mask >> l & 1u))
        fail(block.kernel, "the shuffle at " + at() + ": lane " + std::to_string(l) + " is not in its own mask");
      for (unsigned m = 0; m < kWarp; ++m) {
        if (!(lead.mask >> m & 1u)) continue;
        const auto who = [&] { return "thread " + std::to_string(warp0 + m); };
        if (warp0 + m >= n)
          fail(block.kernel, "the shuffle at " + at() + " names lane " + std::to_string(m) + ", past the block's last thread");
        const DeviceThread& mate = *block.threads[warp0 + m];
        if (mate.wait == Wait::kReturned)
          fail(block.kernel, "divergent shuffle at " + at() + ": " + who() + ", named by its mask, returned");
        if (mate.wait == Wait::kBarrier)
          fail(block.kernel, "divergent shuffle at " + at() + ": " + who() + " waits at the barrier at " + site(mate.where));
        if (!same_site(mate.where, lead.where) || mate.mask != lead.mask)
          fail(block.kernel, "divergent shuffle at " + at() + ": " + who() + " waits at the shuffle at " + site(mate.where));
      }
      const unsigned mask = lead.mask;
      for (unsigned m = 0; m < kWarp; ++m) {
        if (!(mask >> m & 1u)) continue;
        DeviceThread& lane = *block.threads[warp0 + m];
        const unsigned width = static_cast<unsigned>(lane.width);
        const unsigned src = m ^ static_cast<unsigned>(lane.lane_mask);
        if (src >= (m / width + 1) * width) {
          lane.result = lane.value;  // a later group: the lane's own value
        } else {
          if (src >= kWarp || !(mask >> src & 1u))
            fail(block.kernel, "the shuffle at " + at() + " reads lane " + std::to_string(src) + ", which its mask does not name");
          lane.result = block.threads[warp0 + src]->value;
        }
      }
      for (unsigned m = 0; m < kWarp; ++m)
        if (mask >> m & 1u) block.threads[warp0 + m]->wait = Wait::kRunning;
      released = true;
    }
  }
  return released;
}

// Releases the block's barrier, or aborts where not every thread waits at the same one.
void resolve_barrier(BlockRun& block) {
  const DeviceThread* first = nullptr;
  unsigned returned = 0;
  for (const DeviceThread* thread : block.threads) {
    const DeviceThread& t = *thread;
    if (t.wait == Wait::kReturned) {
      ++returned;
    } else if (first == nullptr) {
      first = &t;
    } else if (!same_site(t.where, first->where)) {
      fail(block.kernel, "divergent barrier: threads wait at " + site(first->where) + " and at " + site(t.where));
    }
  }
  if (returned > 0)
    fail(block.kernel, "the barrier at " + site(first->where) + " is reached by " +
                           std::to_string(block.threads.size() - returned) + " of " +
                           std::to_string(block.threads.size()) + " threads; the others returned");
  for (DeviceThread* t : block.threads) t->wait = Wait::kRunning;
}

// A new slot t: its fiber, on a stack of its own, runs the current block's body each time it is
// resumed after the block's previous run returned.
DeviceThread* make_thread(unsigned t) {
  auto* thread = new DeviceThread;
  // Stack tops staggered by a cache line each, so that the fibers' frames do not all map to
  // the same cache sets.
  const std::size_t stagger = 64 * (t % 61);
  void* top = static_cast<char*>(thread->stack.top()) - stagger;
  ctx::stack_context sctx;
  sctx.sp = top;
  sctx.size = kStackBytes - stagger;
  thread->fiber = ctx::fiber(std::allocator_arg, ctx::preallocated(top, sctx.size, sctx), PooledStack{},
                             [thread](ctx::fiber&& sink) -> ctx::fiber {
#if defined(__SANITIZE_ADDRESS__)
                               __sanitizer_finish_switch_fiber(nullptr, &t_scheduler_stack_bottom,
                                                               &t_scheduler_stack_size);
#endif
                               thread->sink = std::move(sink);
                               for (;;) {
                                 (*t_block->body)();
                                 thread->wait = Wait::kReturned;
                                 yield_to_scheduler(*thread);
                               }
                             });
  return thread;
}

void run_block(BlockRun& block) {
  const unsigned n = static_cast<unsigned>(block.threads.size());
  std::fill(block.shared.begin(), block.shared.end(), static_cast<unsigned char>(0xff));
  for (DeviceThread* t : block.threads) t->wait = Wait::kRunning;
  for (;;) {
    for (unsigned i = 0; i < n; ++i) {
      const unsigned t = g_order == ThreadOrder::kForward ? i : n - 1 - i;
      if (block.threads[t]->wait == Wait::kRunning) resume(block, t);
    }
    bool all_returned = true;
    for (const DeviceThread* t : block.threads) all_returned = all_returned && t->wait == Wait::kReturned;
    if (all_returned) return;
    if (!resolve_shuffles(block)) resolve_barrier(block);
  }
}

}  // namespace

ThreadOrder thread_order() { return g_order; }
void set_thread_order(ThreadOrder order) { g_order = order; }

const ThreadCoordinates& coordinates() { return t_coordinates; }

void* dynamic_shared_memory() { return current_block("dynamic shared memory").shared.data(); }

void run_grid(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body) {
  if (t_block != nullptr) fail(kernel, std::string("launched from inside kernel ") + t_block->kernel);
  const unsigned threads = block.x * block.y * block.z;
  while (t_threads.size() < threads) t_threads.push_back(make_thread(static_cast<unsigned>(t_threads.size())));
  BlockRun run;
  run.kernel = kernel;
  run.body = &body;
  run.threads = std::span<DeviceThread* const>(t_threads.data(), threads);
  run.shared.resize(shared_bytes);
  t_block = &run;
  t_coordinates.block_dim = block;
  t_coordinates.grid_dim = grid;
  const std::size_t blocks = static_cast<std::size_t>(grid.x) * grid.y * grid.z;
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::size_t b = g_order == ThreadOrder::kForward ? i : blocks - 1 - i;
    t_coordinates.block_index = uint3{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                                      static_cast<unsigned>(b / (static_cast<std::size_t>(grid.x) * grid.y))};
    run_block(run);
  }
  t_block = nullptr;
}

void sync_threads(Site where) {
  BlockRun& block = current_block("__syncthreads");
  DeviceThread& self = *block.threads[block.running];
  self.wait = Wait::kBarrier;
  self.where = where;
  yield_to_scheduler(self);
}

std::uint64_t shuffle_xor(unsigned mask, std::uint64_t value, int lane_mask, int width, Site where) {
  BlockRun& block = current_block("__shfl_xor_sync");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
    fail(block.kernel, "the shuffle at " + site(where) + " has width " + std::to_string(width) + " (a power of two up to 32)");
  DeviceThread& self = *block.threads[block.running];
  self.wait = Wait::kShuffle;
  self.where = where;
  self.mask = mask;
  self.lane_mask = lane_mask;
  self.width = width;
  self.value = value;
  yield_to_scheduler(self);
  return self.result;
}

}  // namespace specula::cuda::host
