// The host execution itself (engine/cuda/host): that it runs kernels as a device would
// (barriers, shuffles, shared memory, streams, graphs, launch checks) and that each thing it
// claims to catch is caught: a planted missing barrier changes results between thread orders,
// a planted divergent barrier or shuffle aborts naming the kernel, a planted missing stream
// ordering changes results, an allocation during a graph capture aborts. Aborts are observed
// in a forked child.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/launch.cuh"

namespace specula::cuda {
namespace {

constexpr int kThreads = 128;

// ---- kernels, correct and planted ----

// out[i] = in[(i + 1) % n] through shared memory, with the barrier between write and read.
__global__ void rotate_kernel(const float* in, float* out) {
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = in[blockIdx.x * kThreads + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * kThreads + threadIdx.x] = tile[(threadIdx.x + 1) % kThreads];
}
// The same without the barrier (planted).
__global__ void rotate_without_barrier_kernel(const float* in, float* out) {
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = in[blockIdx.x * kThreads + threadIdx.x];
  out[blockIdx.x * kThreads + threadIdx.x] = tile[(threadIdx.x + 1) % kThreads];
}
// Every thread gets the block's sum (device_math.cuh's block_sum: shuffles and barriers).
__global__ void block_sum_kernel(const float* in, float* out) {
  __shared__ float partial[kThreads / 32];
  const float v = block_sum<kThreads>(in[threadIdx.x], partial);
  out[threadIdx.x] = v;
}
// A barrier only half the block reaches (planted).
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < kThreads / 2) __syncthreads();
  out[threadIdx.x] = 1.0f;
}
// A full-warp shuffle only half the warp reaches (planted).
__global__ void divergent_shuffle_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
// Reads what the caller wrote to `in` (the stream-ordering cases).
__global__ void copy_kernel(const float* in, float* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}
// Dynamic shared memory: out[i] = in[n - 1 - i] through it.
__global__ void reverse_kernel(const float* in, float* out, int n) {
  SPECULA_DYNAMIC_SHARED(float, buffer);
  for (int i = threadIdx.x; i < n; i += blockDim.x) buffer[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buffer[n - 1 - i];
}

// ---- helpers ----

struct Buffer {
  float* ptr = nullptr;
  std::size_t count;
  explicit Buffer(std::size_t n) : count(n) { REQUIRE(cudaMalloc(&ptr, n * sizeof(float)) == cudaSuccess); }
  ~Buffer() { cudaFree(ptr); }
  void upload(const std::vector<float>& v, cudaStream_t s) {
    REQUIRE(cudaMemcpyAsync(ptr, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
  }
  std::vector<float> download(cudaStream_t s) const {
    std::vector<float> v(count);
    REQUIRE(cudaMemcpyAsync(v.data(), ptr, count * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    return v;
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};

std::vector<float> iota(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

// Runs `body` in a forked child; returns what it wrote to stderr if it was killed by SIGABRT,
// and fails the test otherwise.
std::string aborted_with(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // not Catch's handler: the abort itself is the result
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char chunk[512];
  for (ssize_t got; (got = read(fds[0], chunk, sizeof chunk)) > 0;) text.append(chunk, static_cast<std::size_t>(got));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child stderr: " << text);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGABRT);
  return text;
}

std::vector<float> run_rotate(bool with_barrier, host::ThreadOrder order) {
  host::set_thread_order(order);
  Stream s;
  Buffer in(2 * kThreads), out(2 * kThreads);
  in.upload(iota(2 * kThreads), s.s);
  if (with_barrier)
    SPECULA_LAUNCH(rotate_kernel, 2, kThreads, 0, s.s, in.ptr, out.ptr);
  else
    SPECULA_LAUNCH(rotate_without_barrier_kernel, 2, kThreads, 0, s.s, in.ptr, out.ptr);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<float> result = out.download(s.s);
  host::set_thread_order(host::ThreadOrder::kForward);
  return result;
}

}  // namespace

TEST_CASE("host execution: barriers and shared memory give the device's results in either thread order",
          "[cuda-host]") {
  std::vector<float> expected(2 * kThreads);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < kThreads; ++t) expected[b * kThreads + t] = static_cast<float>(b * kThreads + (t + 1) % kThreads);
  CHECK(run_rotate(true, host::ThreadOrder::kForward) == expected);
  CHECK(run_rotate(true, host::ThreadOrder::kReverse) == expected);
}

TEST_CASE("host execution: a planted missing barrier changes the results between thread orders", "[cuda-host]") {
  const std::vector<float> forward = run_rotate(false, host::ThreadOrder::kForward);
  const std::vector<float> reverse = run_rotate(false, host::ThreadOrder::kReverse);
  CHECK(forward != reverse);
}

TEST_CASE("host execution: warp shuffles and block sums equal the sums", "[cuda-host]") {
  Stream s;
  Buffer in(kThreads), out(kThreads);
  in.upload(iota(kThreads), s.s);
  SPECULA_LAUNCH(block_sum_kernel, 1, kThreads, 0, s.s, in.ptr, out.ptr);
  const std::vector<float> result = out.download(s.s);
  for (float v : result) CHECK(v == kThreads * (kThreads - 1) / 2.0f);
}

TEST_CASE("host execution: dynamic shared memory is the launch's, checked against the function's limit",
          "[cuda-host]") {
  Stream s;
  const int n = 20000;  // 80,000 bytes: over the default 48 KiB limit
  Buffer in(n), out(n);
  in.upload(iota(n), s.s);
  SPECULA_LAUNCH(reverse_kernel, 1, kThreads, n * sizeof(float), s.s, in.ptr, out.ptr, n);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4) == cudaSuccess);
  SPECULA_LAUNCH(reverse_kernel, 1, kThreads, n * sizeof(float), s.s, in.ptr, out.ptr, n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> result = out.download(s.s);
  for (int i = 0; i < n; ++i) REQUIRE(result[i] == static_cast<float>(n - 1 - i));
  SPECULA_LAUNCH(copy_kernel, 1, 2048, 0, s.s, in.ptr, out.ptr, n);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
}

TEST_CASE("host execution: a planted divergent barrier or shuffle aborts naming the kernel", "[cuda-host]") {
  const std::string barrier = aborted_with([] {
    Buffer out(kThreads);
    SPECULA_LAUNCH(divergent_barrier_kernel, 1, kThreads, 0, nullptr, out.ptr);
    cudaDeviceSynchronize();
  });
  CHECK_THAT(barrier, Catch::Contains("divergent_barrier_kernel") && Catch::Contains("barrier"));
  const std::string shuffle = aborted_with([] {
    Buffer out(kThreads);
    SPECULA_LAUNCH(divergent_shuffle_kernel, 1, kThreads, 0, nullptr, out.ptr);
    cudaDeviceSynchronize();
  });
  CHECK_THAT(shuffle, Catch::Contains("divergent_shuffle_kernel") && Catch::Contains("divergent shuffle"));
}

TEST_CASE("host execution: a planted missing stream ordering changes the results; an event orders them",
          "[cuda-host]") {
  const int n = 256;
  const auto run = [n](bool ordered) {
    Stream s;
    Buffer in(n), out(n);
    REQUIRE(cudaMemset(in.ptr, 0, n * sizeof(float)) == cudaSuccess);  // the legacy stream
    if (ordered) {
      cudaEvent_t done = nullptr;
      REQUIRE(cudaEventCreate(&done) == cudaSuccess);
      REQUIRE(cudaEventRecord(done, nullptr) == cudaSuccess);
      REQUIRE(cudaStreamWaitEvent(s.s, done) == cudaSuccess);
      cudaEventDestroy(done);
    }
    SPECULA_LAUNCH(copy_kernel, 1, kThreads, 0, s.s, in.ptr, out.ptr, n);
    return out.download(s.s);
  };
  for (float v : run(true)) REQUIRE(v == 0.0f);
  bool any_unwritten = false;
  for (float v : run(false)) any_unwritten = any_unwritten || std::isnan(v);
  CHECK(any_unwritten);
}

TEST_CASE("host execution: graphs replay their launches; an allocation during a capture aborts", "[cuda-host]") {
  Stream s;
  const int n = 256;
  Buffer in(n), out(n);
  REQUIRE(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  SPECULA_LAUNCH(copy_kernel, 1, kThreads, 0, s.s, in.ptr, out.ptr, n);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int round = 0; round < 2; ++round) {
    std::vector<float> values = iota(n);
    for (float& v : values) v += static_cast<float>(100 * round);
    in.upload(values, s.s);
    REQUIRE(cudaGraphLaunch(exec, s.s) == cudaSuccess);
    CHECK(out.download(s.s) == values);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  const std::string text = aborted_with([] {
    Stream captured;
    cudaStreamBeginCapture(captured.s, cudaStreamCaptureModeGlobal);
    void* p = nullptr;
    cudaMalloc(&p, 64);
  });
  CHECK_THAT(text, Catch::Contains("cudaMalloc") && Catch::Contains("captures a graph"));
}

}  // namespace specula::cuda
