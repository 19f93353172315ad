// MedusaCudaBackend: Medusa heads behind engine/medusa_backend.h on GPU 0, medusa_cpu.cpp's
// forward kernel for kernel: the target's final norm over the states, then per head its
// ResBlocks x += SiLU(W x + b) and its lm_head, every product the batch-invariant bf16 kernel.
// Each call uploads the states, enqueues everything on the workspace's stream, copies the
// logits back and synchronises once.
#include "engine/cpu/matmul.h"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/device.h"
#include "engine/cuda/device_memory.cuh"
#include "engine/cuda/device_weights.cuh"
#include "engine/cuda/head_cuda.h"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda {
namespace {

// One stream's scratch, grown to the largest forward seen (the stream is idle between calls).
struct MedusaCudaWorkspace : StreamWorkspace {
  DeviceBuffer states;       // [n, hidden] the target's states, then their final norm
  DeviceBuffer x, y;         // [n, hidden] a head's stream and one block's product
  DeviceBuffer head_logits;  // [n, vocab] one head's logits
  DeviceBuffer logits;       // [n, heads, vocab] head i's row r at [r, i]
};

class MedusaCudaBackend : public MedusaBackend {
 public:
  MedusaCudaBackend(const MedusaModel& medusa, const Model& target)
      : MedusaBackend(medusa), eps_(target.config().rms_norm_eps) {
    const MedusaConfig& c = medusa.config();
    SPECULA_CHECK(c.hidden_size % kMatmulKStep == 0, medusa.dir(), ": backend 'cuda': hidden_size ", c.hidden_size,
                  " is not a multiple of ", kMatmulKStep, " (the product kernel reads ", kMatmulKStep,
                  " weights at a time)");
    SPECULA_CHECK(target.final_norm().numel() == c.hidden_size, target.final_norm().origin, ": the final norm '",
                  target.final_norm().name, "' has ", target.final_norm().numel(), " weights, the Medusa heads in ",
                  medusa.dir(), " read hidden_size ", c.hidden_size);
    CUDA_CHECK(cudaSetDevice(0));
    final_norm_ = upload_f32(cpu::tensor_f32(target.final_norm()));
    for (const MedusaModel::Head& h : medusa.heads()) {
      Head head;
      for (const MedusaModel::ResBlock& b : h.blocks)
        head.blocks.push_back({upload_bf16_rows({b.weight}, c.hidden_size), upload_f32(cpu::tensor_f32(*b.bias))});
      head.lm_head = upload_bf16_rows({h.lm_head}, c.hidden_size);
      heads_.push_back(std::move(head));
    }
  }

  BackendKind kind() const override { return BackendKind::kCuda; }

  std::unique_ptr<Workspace> make_workspace() const override {
    return std::make_unique<MedusaCudaWorkspace>();
  }

  void forward(std::span<const float> states, int n, int heads, Workspace& workspace,
               std::span<float> logits) const override {
    auto* ws = dynamic_cast<MedusaCudaWorkspace*>(&workspace);
    SPECULA_CHECK(ws != nullptr, "medusa forward: the workspace was not made by the CUDA Medusa backend");
    MedusaCudaWorkspace& s = *ws;
    const MedusaConfig& c = config();
    const int hidden = c.hidden_size, vocab = c.vocab_size;
    const std::size_t rows = static_cast<std::size_t>(n), k = static_cast<std::size_t>(heads);
    SPECULA_CHECK(heads >= 1 && heads <= c.num_heads, "medusa forward: ", heads, " heads asked of ", c.num_heads);
    SPECULA_CHECK(n > 0 && states.size() == rows * hidden && logits.size() == rows * k * vocab, "medusa forward: ", n,
                  " rows of ", heads, " heads need states of ", rows * hidden, " floats and logits of ",
                  rows * k * vocab, ", got ", states.size(), " and ", logits.size());
    grow(s.states, states.size_bytes());
    grow(s.x, states.size_bytes());
    grow(s.y, states.size_bytes());
    grow(s.head_logits, rows * vocab * sizeof(float));
    grow(s.logits, logits.size_bytes());
    const cudaStream_t stream = s.stream;
    float *normed = s.states.as<float>(), *x = s.x.as<float>(), *y = s.y.as<float>();
    CUDA_CHECK(cudaMemcpyAsync(normed, states.data(), states.size_bytes(), cudaMemcpyHostToDevice, stream));
    launch_rms_norm(normed, nullptr, final_norm_.as<float>(), eps_, normed, n, hidden, stream);
    for (std::size_t i = 0; i < k; ++i) {
      const Head& head = heads_[i];
      launch_copy_rows(normed, hidden, nullptr, x, hidden, n, hidden, stream);
      for (const Block& b : head.blocks) {
        launch_linear(x, b.weight.as<__nv_bfloat16>(), b.bias.as<float>(), y, n, hidden, hidden, false, gemm_, stream);
        launch_add_silu(y, x, rows * hidden, stream);
      }
      launch_linear(x, head.lm_head.as<__nv_bfloat16>(), nullptr, s.head_logits.as<float>(), n, hidden, vocab, false,
                    gemm_, stream);
      // Head i's rows land at [r, i] of the [n, heads, vocab] result.
      launch_copy_rows(s.head_logits.as<float>(), vocab, nullptr, s.logits.as<float>() + i * vocab,
                       static_cast<int>(k) * vocab, n, vocab, stream);
    }
    CUDA_CHECK(cudaMemcpyAsync(logits.data(), s.logits.ptr, logits.size_bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 private:
  struct Block {
    DeviceBuffer weight;  // bf16 [hidden, hidden]
    DeviceBuffer bias;    // f32 [hidden]
  };
  struct Head {
    std::vector<Block> blocks;
    DeviceBuffer lm_head;  // bf16 [vocab, hidden]
  };

  float eps_;
  GemmScratch gemm_;  // cublas_prefill off: every product is the batch-invariant kernel
  DeviceBuffer final_norm_;  // f32 [hidden] the target's
  std::vector<Head> heads_;
};

}  // namespace

std::unique_ptr<MedusaBackend> make_cuda_medusa_backend(const MedusaModel& medusa, const Model& target) {
  if (cuda_device_count() == 0)
    throw SpeculaError(medusa.dir() + ": backend 'cuda': no usable GPU (" + cuda_unavailable_reason() +
                       "); use --backend cpu");
  return std::make_unique<MedusaCudaBackend>(medusa, target);
}

}  // namespace specula::cuda
