// defines: the device memory owners of the CUDA module's backends (cuda_backend.cu,
// head_cuda.cu, medusa_cuda.cu): DeviceBuffer (device allocation), PinnedBuffer (page-locked
// host memory for uploads), PoolAccount (a KV budget shared by every cache of one backend) and
// DeviceKvPages (one PageStorage's pages on the device, charged to an account), grow,
// StreamWorkspace (a workspace's stream), and device_pages_after_copies, a cache's pages after
// the copy list it queued.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/cuda_plan.h"
#include "engine/cuda/kernels.cuh"
#include "kv/page_storage.h"

namespace specula::cuda {

inline constexpr double kMiB = 1024.0 * 1024.0;

// A device allocation freed with its owner.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : bytes(n) {
    if (n > 0) CUDA_CHECK(cudaMalloc(&ptr, n));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(std::exchange(o.ptr, nullptr)), bytes(std::exchange(o.bytes, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);  // no throw from a destructor; a failed free leaks
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// Makes `buffer` hold at least `bytes` (rounded up to `alignment`), replacing it, contents
// lost, when it is smaller: nothing queued may still read it.
inline void grow(DeviceBuffer& buffer, std::size_t bytes, std::size_t alignment = kAlign) {
  if (buffer.bytes < bytes) buffer = DeviceBuffer(align_up(bytes, alignment));
}

// A workspace that owns one non-blocking stream, synchronised and destroyed with it.
struct StreamWorkspace : Workspace {
  cudaStream_t stream = nullptr;
  StreamWorkspace() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  StreamWorkspace(const StreamWorkspace&) = delete;
  StreamWorkspace& operator=(const StreamWorkspace&) = delete;
  ~StreamWorkspace() override {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
};

// Pinned host memory for uploads and results.
struct PinnedBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void reserve(std::size_t n) {
    if (n <= bytes) return;
    if (ptr) CUDA_CHECK(cudaFreeHost(ptr));
    ptr = nullptr;
    bytes = 0;
    CUDA_CHECK(cudaMallocHost(&ptr, n));
    bytes = n;
  }
  ~PinnedBuffer() {
    if (ptr) cudaFreeHost(ptr);
  }
};

// The KV budget shared by every cache of one backend; `owner` and `setting` name the backend
// and what sized the budget in a refusal.
struct PoolAccount {
  std::mutex mutex;
  std::size_t capacity = 0, used = 0;
  std::string owner, setting;
};

inline std::atomic<std::uint64_t> next_pages_id{1};

// The device pages of one PageStorage (kv/page_storage.h DevicePages), charged to an account.
class DeviceKvPages : public DevicePages {
 public:
  // The pages are zeroed on `stream`, the stream whose forwards use them first.
  DeviceKvPages(const KvLayout& layout, int num_blocks, std::shared_ptr<PoolAccount> account, cudaStream_t stream)
      : account_(std::move(account)), id_(next_pages_id++) {
    const std::size_t bytes = kv_pages_bytes(layout, num_blocks);
    {
      std::lock_guard lock(account_->mutex);
      if (account_->used + bytes > account_->capacity)
        throw ResourceExhausted(detail::concat(account_->owner, ": a KV cache of ", num_blocks, " blocks needs ",
                                               bytes / kMiB, " MiB; the KV pool has ",
                                               (account_->capacity - account_->used) / kMiB, " MiB left of ",
                                               account_->capacity / kMiB, " MiB (", account_->setting, ")"));
      account_->used += bytes;
      charged_ = bytes;
    }
    try {
      buffer_ = DeviceBuffer(bytes);
      CUDA_CHECK(cudaMemsetAsync(buffer_.ptr, 0, bytes, stream));
    } catch (...) {
      release();
      throw;
    }
    view_.layer0 = buffer_.ptr;
    view_.layer_stride = static_cast<std::size_t>(num_blocks) * 2 * layout.block_size * layout.kv_dim();
    view_.block_size = layout.block_size;
    view_.kv_dim = layout.kv_dim();
    view_.num_layers = layout.num_layers;
    view_.dtype = layout.dtype == KvDType::kBF16 ? DType::BF16 : DType::F32;  // f32 or bf16 (PageStorage checks)
  }
  ~DeviceKvPages() override { release(); }
  const DevicePagesView& view() const { return view_; }
  std::uint64_t id() const { return id_; }
  // Expires when the pages go, and with them every graph that writes them.
  std::weak_ptr<const void> liveness() const { return alive_; }

 private:
  void release() {
    std::lock_guard lock(account_->mutex);
    account_->used -= std::exchange(charged_, 0);
  }

  std::shared_ptr<PoolAccount> account_;
  std::uint64_t id_;
  std::shared_ptr<const void> alive_ = std::make_shared<char>();
  std::size_t charged_ = 0;  // bytes of the pool this cache holds
  DeviceBuffer buffer_;
  DevicePagesView view_;
};

// The device pages of `pages` (made on first use, charged to `account`), after the copies its
// cache queued (commit and copy-on-write) are enqueued on `stream` as one kernel; `copies` is
// the caller's upload buffer for them, grown as needed.
inline const DeviceKvPages& device_pages_after_copies(PageStorage& pages, const std::shared_ptr<PoolAccount>& account,
                                                      DeviceBuffer& copies, cudaStream_t stream) {
  if (!pages.device_state())
    pages.device_state() = std::make_unique<DeviceKvPages>(pages.layout(), pages.num_blocks(), account, stream);
  const auto& device_pages = static_cast<const DeviceKvPages&>(*pages.device_state());
  const std::vector<KvCopy> queued = pages.take_device_copies();
  if (!queued.empty()) {
    const std::vector<std::int32_t> packed = pack_copies(queued);
    grow(copies, packed.size() * 4, 1 << 16);
    CUDA_CHECK(cudaMemcpyAsync(copies.ptr, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice, stream));
    launch_kv_copies(copies.as<std::int32_t>(), static_cast<int>(queued.size()), device_pages.view(), stream);
  }
  return device_pages;
}

}  // namespace specula::cuda
