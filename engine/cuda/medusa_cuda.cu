// MedusaCudaBackend: Medusa heads behind engine/medusa_backend.h on GPU 0, medusa_cpu.cpp's
// forward kernel for kernel: the target's final norm over the states, then per head its
// ResBlocks x += SiLU(W x + b) and its lm_head, every product the batch-invariant bf16 kernel.
// forward uploads the states, enqueues everything on the workspace's stream, copies the logits
// back and synchronises once; enqueue_draws uploads the states with the trees' plan, enqueues the
// same heads, then the sampling kernel over the contexts' rows and the children kernel level by
// level, and leaves the draws there (CudaDraws) without waiting.
#include <cstring>
#include <memory>

#include "engine/cpu/matmul.h"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/cuda_draws.cuh"
#include "engine/cuda/device.h"
#include "engine/cuda/device_memory.cuh"
#include "engine/cuda/device_weights.cuh"
#include "engine/cuda/draft_plan.h"
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
  DeviceBuffer draws;        // enqueue_draws' upload (DrawUpload) and outputs, read by a later forward_verify
  PinnedBuffer staging;      // its upload on the host
  DrawMarks marks;           // around enqueue_draws' one round
};

// enqueue_draws' buffer: the upload (the states and plan_medusa_draws' arrays) at its start,
// then the contexts' logit rows and distributions and the draws. Offsets in bytes.
struct DrawUpload {
  std::vector<unsigned char> data;  // the upload, [upload bytes]
  std::size_t states = 0, context_rows = 0, child_first = 0, modes = 0, sources = 0, uniforms = 0;
  DrawOptionsAt options;
  std::size_t context_logits = 0, probs = 0, tokens = 0, bytes = 0;
};

DrawUpload pack_draws(std::span<const float> states, const MedusaDrawPlan& plan, int vocab) {
  DrawUpload up;
  const std::size_t contexts = static_cast<std::size_t>(plan.contexts());
  up.states = append_aligned(up.data, states.data(), states.size());
  up.context_rows = append_aligned(up.data, plan.context_rows.data(), contexts);
  up.options = append_draw_options(up.data, plan.options);
  up.child_first = append_aligned(up.data, plan.child_first.data(), contexts + 1);
  up.modes = append_aligned(up.data, plan.modes.data(), contexts);
  up.sources = append_aligned(up.data, plan.sources.data(), contexts);
  up.uniforms = append_aligned(up.data, plan.uniforms.data(), plan.uniforms.size());
  const std::size_t rows_bytes = contexts * static_cast<std::size_t>(vocab) * sizeof(float);
  up.context_logits = align_up(up.data.size());
  up.probs = align_up(up.context_logits + rows_bytes);
  up.tokens = align_up(up.probs + rows_bytes);
  up.bytes = up.tokens + static_cast<std::size_t>(plan.draws()) * sizeof(int);
  return up;
}

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
    MedusaCudaWorkspace& s = medusa_workspace(workspace);
    const std::size_t vocab = static_cast<std::size_t>(config().vocab_size);
    check_rows(states, n, heads);
    SPECULA_CHECK(logits.size() == static_cast<std::size_t>(n) * static_cast<std::size_t>(heads) * vocab,
                  "medusa forward: ", n, " rows of ", heads, " heads need logits of ",
                  static_cast<std::size_t>(n) * static_cast<std::size_t>(heads) * vocab, " floats, got ", logits.size());
    grow(s.states, states.size_bytes());
    CUDA_CHECK(cudaMemcpyAsync(s.states.ptr, states.data(), states.size_bytes(), cudaMemcpyHostToDevice, s.stream));
    enqueue_heads(s.states.as<float>(), n, heads, s);
    CUDA_CHECK(cudaMemcpyAsync(logits.data(), s.logits.ptr, logits.size_bytes(), cudaMemcpyDeviceToHost, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }

  bool drafts_on_device() const override { return true; }

  EnqueuedDraws enqueue_draws(std::span<const float> states, int n, int heads, std::span<const MedusaTree> trees,
                              Workspace& workspace) const override {
    MedusaCudaWorkspace& s = medusa_workspace(workspace);
    const int vocab = config().vocab_size;
    check_rows(states, n, heads);
    SPECULA_CHECK(trees.size() == static_cast<std::size_t>(n), "medusa draws: ", trees.size(), " trees for ", n, " rows");
    const MedusaDrawPlan plan = plan_medusa_draws(trees, heads);
    const DrawUpload up = pack_draws(states, plan, vocab);
    const cudaStream_t stream = s.stream;
    CUDA_CHECK(cudaStreamSynchronize(stream));  // no queued work still reads the draws' buffer or its staging
    s.marks.begin(1);
    grow(s.draws, up.bytes, 1 << 20);
    s.staging.reserve(align_up(up.data.size(), 1 << 20));
    std::memcpy(s.staging.ptr, up.data.data(), up.data.size());
    unsigned char* base = s.draws.as<unsigned char>();
    const auto ints = [base](std::size_t at) { return reinterpret_cast<int*>(base + at); };
    const auto floats = [base](std::size_t at) { return reinterpret_cast<float*>(base + at); };
    CUDA_CHECK(cudaEventRecord(s.marks.events[0], stream));
    CUDA_CHECK(cudaMemcpyAsync(base, s.staging.ptr, up.data.size(), cudaMemcpyHostToDevice, stream));
    enqueue_heads(floats(up.states), n, heads, s);
    // Each context's head row, its distribution, then its children, a level after the one it follows.
    const int contexts = plan.contexts();
    launch_copy_rows(s.logits.as<float>(), vocab, ints(up.context_rows), floats(up.context_logits), vocab, contexts, vocab,
                     stream);
    launch_sample(floats(up.context_logits), floats(up.options.temperature), ints(up.options.top_k),
                  floats(up.options.top_p), floats(up.options.min_p), nullptr, contexts, vocab, floats(up.probs), nullptr,
                  stream);
    const auto* uniforms = reinterpret_cast<const double*>(base + up.uniforms);
    const std::size_t v = static_cast<std::size_t>(vocab);
    for (std::size_t d = 0; d + 1 < plan.level_first.size(); ++d) {
      const int first = plan.level_first[d], count = plan.level_first[d + 1] - first;
      const std::size_t f = static_cast<std::size_t>(first);
      launch_draw_children(floats(up.probs) + f * v, vocab, count, ints(up.child_first) + f, ints(up.modes) + f,
                           ints(up.sources) + f, uniforms, ints(up.tokens), stream);
    }
    CUDA_CHECK(cudaEventRecord(s.marks.events[1], stream));
    const DrawsAt at{ints(up.tokens), plan.keep_q ? floats(up.probs) : nullptr};
    return EnqueuedDraws{std::make_shared<CudaDraws>(s.marks, plan.draw_rows, plan.keep_q, 1, 0, 0, at), plan.draw_of};
  }

 private:
  static MedusaCudaWorkspace& medusa_workspace(Workspace& workspace) {
    auto* ws = dynamic_cast<MedusaCudaWorkspace*>(&workspace);
    SPECULA_CHECK(ws != nullptr, "medusa forward: the workspace was not made by the CUDA Medusa backend");
    return *ws;
  }

  void check_rows(std::span<const float> states, int n, int heads) const {
    const MedusaConfig& c = config();
    SPECULA_CHECK(heads >= 1 && heads <= c.num_heads, "medusa forward: ", heads, " heads asked of ", c.num_heads);
    SPECULA_CHECK(n > 0 && states.size() == static_cast<std::size_t>(n) * static_cast<std::size_t>(c.hidden_size),
                  "medusa forward: ", n, " rows need states of ", static_cast<std::size_t>(n) * c.hidden_size,
                  " floats, got ", states.size());
  }

  // The heads over `states` (device, [n, hidden], normed in place) on the workspace's stream,
  // their logits left in s.logits, [n, heads, vocab].
  void enqueue_heads(float* states, int n, int heads, MedusaCudaWorkspace& s) const {
    const MedusaConfig& c = config();
    const int hidden = c.hidden_size, vocab = c.vocab_size;
    const std::size_t rows = static_cast<std::size_t>(n), k = static_cast<std::size_t>(heads);
    const std::size_t state_bytes = rows * static_cast<std::size_t>(hidden) * sizeof(float);
    grow(s.x, state_bytes);
    grow(s.y, state_bytes);
    grow(s.head_logits, rows * vocab * sizeof(float));
    grow(s.logits, rows * k * vocab * sizeof(float));
    const cudaStream_t stream = s.stream;
    float *normed = states, *x = s.x.as<float>(), *y = s.y.as<float>();
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
  }

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
