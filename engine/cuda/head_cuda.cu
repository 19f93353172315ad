// HeadCudaBackend: an EAGLE head (EAGLE-3 or EAGLE-1) behind engine/head_backend.h on GPU 0,
// head_cpu.cpp's step kernel for kernel: matrices in bf16 through the batch-invariant product
// (never cuBLASLt, so a row's results do not depend on the batch), the KV pages on the device.
// Each call uploads its inputs, enqueues everything on the workspace's stream, copies the
// results back and synchronises once; enqueue_draft runs rounds of forwards and their draws
// back to back and leaves the draws on the device.
#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/cpu/ops.h"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/cuda_draws.cuh"
#include "engine/cuda/device.h"
#include "engine/cuda/device_memory.cuh"
#include "engine/cuda/device_weights.cuh"
#include "engine/cuda/head_cuda.h"
#include "engine/cuda/kernels.cuh"

namespace specula::cuda {
namespace {

// One stream's scratch; each buffer grows to the largest forward seen (each call waits for the
// stream first, so a buffer is replaced while nothing enqueued reads it).
struct HeadCudaWorkspace : StreamWorkspace {
  DeviceBuffer taps;          // [n, num_taps * target_hidden] project's input
  DeviceBuffer x;             // [n, hidden] the rows' input states
  DeviceBuffer a;             // [n, 2 hidden] the concatenated input
  DeviceBuffer out;           // [n, hidden] the residual stream, the rows' output states
  DeviceBuffer h, t;          // [n, hidden] each
  DeviceBuffer qkv;           // [n, q_dim + 2 kv_dim]
  DeviceBuffer attn;          // [n, q_dim]
  DeviceBuffer gu;            // [n, 2 ffn] gate | up
  DeviceBuffer act;           // [n, ffn]
  DeviceBuffer last;          // [num_logits, hidden] the rows that want logits
  DeviceBuffer logits;        // [num_logits, draft_vocab]
  DeviceBuffer upload;        // pack_step's data
  DeviceBuffer copies;        // the cache's queued KV copies
  // enqueue_draft's: its buffer (HeadDraftUpload), read by a later forward_verify, and its upload
  // on the host; every round's rows' input and output states, [rows of every round, hidden]
  // each; a round's logit rows over the target's vocabulary, [logit rows, vocab].
  DeviceBuffer draft;
  PinnedBuffer draft_staging;
  DeviceBuffer states_in, states_out;
  DeviceBuffer spread;
  DrawMarks draft_marks;      // around enqueue_draft's rounds
};

// enqueue_draft's buffer: pack_draft's (its outputs, then the upload), the upload extended by
// the taps and the state feeds (byte offsets into the buffer).
struct HeadDraftUpload {
  DraftUpload draft;
  std::size_t taps = 0;         // [round 0 rows, taps width] float
  std::size_t state_feeds = 0;  // [rows of every round] int
};

HeadDraftUpload pack_head_draft(const DraftRounds& draft, std::span<const int> state_feeds, std::span<const float> taps,
                                int vocab, const CudaOptions& options, std::uint64_t pages_id) {
  HeadDraftUpload up{pack_draft(draft, vocab, 0, options, pages_id)};
  DraftUpload& d = up.draft;
  up.taps = d.upload_at + append_aligned(d.data, taps.data(), taps.size());
  up.state_feeds = d.upload_at + append_aligned(d.data, state_feeds.data(), state_feeds.size());
  d.upload_bytes = d.data.size();
  d.device_bytes = d.upload_at + d.upload_bytes;
  return up;
}

HeadCudaWorkspace& head_workspace(Workspace& workspace) {
  auto* ws = dynamic_cast<HeadCudaWorkspace*>(&workspace);
  SPECULA_CHECK(ws != nullptr, "head forward: the workspace was not made by the CUDA head backend");
  return *ws;
}

// Throws SpeculaError naming `what` of the head in `dir` unless `value` is a positive multiple
// of the product kernel's step.
void check_inner(int value, const char* what, const std::string& dir) {
  SPECULA_CHECK(value > 0 && value % kMatmulKStep == 0, dir, ": backend 'cuda': ", what, " ", value,
                " is not a multiple of ", kMatmulKStep, " (the product kernel reads ", kMatmulKStep,
                " weights at a time)");
}

class HeadCudaBackend : public HeadBackend {
 public:
  HeadCudaBackend(const HeadModel& head, const Model& target)
      : HeadBackend(head),
        account_(std::make_shared<PoolAccount>()),
        eagle1_(head.config().kind == HeadKind::kEagle1),
        embed_view_(head.embed_tokens() ? *head.embed_tokens() : target.embed_tokens()),
        final_norm_eps_(head.final_norm() ? head.config().layer.rms_norm_eps : target.config().rms_norm_eps) {
    const HeadConfig& c = head.config();
    const ModelConfig& l = c.layer;
    const int hidden = c.hidden_size();
    check_inner(hidden, "hidden_size", head.dir());
    check_inner(l.q_dim(), "the attention width (heads x head_dim)", head.dir());
    check_inner(l.intermediate_size, "intermediate_size", head.dir());
    check_inner(c.num_taps() * c.target_hidden_size, "the taps' width", head.dir());
    SPECULA_CHECK(l.head_dim() % 2 == 0 && l.head_dim() <= kMaxHeadDim, head.dir(), ": backend 'cuda': head_dim ",
                  l.head_dim(), " is odd or above ", kMaxHeadDim);
    SPECULA_CHECK(embed_view_.shape == std::vector<int64_t>({l.vocab_size, hidden}), embed_view_.origin,
                  ": the embedding '", embed_view_.name, "' is not [vocab_size ", l.vocab_size, ", hidden_size ", hidden,
                  "] of the head in ", head.dir());
    const TensorView& lm_head = head.lm_head() ? *head.lm_head() : target.lm_head();
    const TensorView& final_norm = head.final_norm() ? *head.final_norm() : target.final_norm();
    SPECULA_CHECK(final_norm.numel() == hidden, "the final norm of ", head.dir(), " (or its target's) has ",
                  final_norm.numel(), " weights, not hidden_size ", hidden);

    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaDeviceGetAttribute(&max_smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    prepare_attention(max_smem_);
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    account_->capacity = free_bytes;
    account_->owner = "the cuda head backend of " + head.dir();
    account_->setting = "the device memory free when the head was loaded";

    const LayerWeights& w = head.layer();
    const int attention_in = eagle1_ ? hidden : 2 * hidden;
    embed_ = upload_as_stored(embed_view_);
    fc_ = upload_bf16_rows({&head.fc()}, eagle1_ ? 2 * hidden : c.num_taps() * c.target_hidden_size);
    qkv_ = upload_bf16_rows({w.q, w.k, w.v}, attention_in);
    o_ = upload_bf16_rows({w.o}, l.q_dim());
    gate_up_ = upload_bf16_rows({w.gate, w.up}, hidden);
    down_ = upload_bf16_rows({w.down}, l.intermediate_size);
    SPECULA_CHECK(lm_head.shape.size() == 2 && lm_head.shape[0] == c.draft_vocab_size, lm_head.origin,
                  ": the lm_head '", lm_head.name, "' is not [draft_vocab_size ", c.draft_vocab_size, ", hidden_size ",
                  hidden, "] of the head in ", head.dir());
    lm_head_ = upload_bf16_rows({&lm_head}, hidden);
    post_norm_ = upload_f32(cpu::tensor_f32(*w.mlp_norm));
    final_norm_ = upload_f32(cpu::tensor_f32(final_norm));
    if (eagle1_) {
      fc_bias_ = upload_f32(cpu::tensor_f32(*head.fc_bias()));
    } else {
      input_norm_ = upload_f32(cpu::tensor_f32(*w.attn_norm));
      hidden_norm_ = upload_f32(cpu::tensor_f32(*head.hidden_norm()));
    }
    inv_freq_ = upload_f32(cpu::RopeTable(l.head_dim(), l.rope_theta, l.rope_scaling).inv_freq());
    const std::vector<int>& to_target = head.draft_to_target();
    draft_to_target_ = upload_bytes(to_target.data(), to_target.size() * sizeof(int));
    // Pack_step's limits: the workspace grows to any forward.
    options_.max_rows = options_.max_logit_rows = std::numeric_limits<int>::max();
  }

  BackendKind kind() const override { return BackendKind::kCuda; }

  KvLayout kv_layout(int block_size) const override {
    KvLayout layout = head().kv_layout(block_size);
    layout.device_pages = true;
    return layout;
  }

  std::unique_ptr<Workspace> make_workspace() const override {
    return std::make_unique<HeadCudaWorkspace>();
  }

  void project(std::span<const float> taps, std::span<float> x, int n, Workspace& workspace) const override {
    const HeadConfig& c = config();
    const int in = c.num_taps() * c.target_hidden_size, hidden = c.hidden_size();
    const std::size_t rows = static_cast<std::size_t>(n);
    SPECULA_CHECK(n > 0 && taps.size() == rows * in && x.size() == rows * hidden, "project: ", n,
                  " rows need taps of ", rows * in, " floats and x of ", rows * hidden, ", got ", taps.size(), " and ",
                  x.size());
    HeadCudaWorkspace& s = head_workspace(workspace);
    CUDA_CHECK(cudaStreamSynchronize(s.stream));  // an enqueued draft may still read the buffers
    grow(s.taps, taps.size_bytes());
    grow(s.x, x.size_bytes());
    CUDA_CHECK(cudaMemcpyAsync(s.taps.ptr, taps.data(), taps.size_bytes(), cudaMemcpyHostToDevice, s.stream));
    enqueue_project(s.taps.as<float>(), s.x.as<float>(), n, s.stream);
    CUDA_CHECK(cudaMemcpyAsync(x.data(), s.x.ptr, x.size_bytes(), cudaMemcpyDeviceToHost, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }

  void forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
               std::span<const float> x, std::span<float> logits, std::span<float> out) const override {
    const HeadConfig& c = config();
    const int n = batch.num_rows(), num_logits = batch.num_logits();
    const std::size_t rows = static_cast<std::size_t>(n), width = static_cast<std::size_t>(c.hidden_size());
    const std::size_t logit_rows = static_cast<std::size_t>(num_logits);
    SPECULA_CHECK(n > 0 && static_cast<int>(plan.row_slots.size()) == n, "head forward: the plan has ",
                  plan.row_slots.size(), " new slots for ", n, " rows");
    SPECULA_CHECK(x.size() == rows * width && out.size() == rows * width, "head forward: x and out hold ", x.size(),
                  " and ", out.size(), " floats, need ", rows * width);
    SPECULA_CHECK(logits.size() == logit_rows * c.draft_vocab_size, "head forward: logits buffer holds ",
                  logits.size(), " floats, need ", logit_rows * c.draft_vocab_size);
    check_pages(pages);

    HeadCudaWorkspace& s = head_workspace(workspace);
    const cudaStream_t stream = s.stream;
    CUDA_CHECK(cudaStreamSynchronize(stream));  // an enqueued draft may still read the buffers
    grow_layer(s, n, num_logits);
    grow(s.x, x.size_bytes());
    grow(s.out, out.size_bytes());
    const DeviceKvPages& device_pages = device_pages_after_copies(pages, account_, s.copies, stream);
    const StepUpload up = pack_step(batch, plan, 0, options_, device_pages.id());
    check_keys(up);
    const std::size_t upload_bytes = up.data.size() * sizeof(std::int32_t);
    grow(s.upload, upload_bytes);
    CUDA_CHECK(cudaMemcpyAsync(s.upload.ptr, up.data.data(), upload_bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(s.x.ptr, x.data(), x.size_bytes(), cudaMemcpyHostToDevice, stream));
    enqueue_layer(up, s.upload.as<std::int32_t>(), s.x.as<float>(), s.out.as<float>(), device_pages.view(), s);
    CUDA_CHECK(cudaMemcpyAsync(out.data(), s.out.ptr, out.size_bytes(), cudaMemcpyDeviceToHost, stream));
    if (num_logits > 0)
      CUDA_CHECK(cudaMemcpyAsync(logits.data(), s.logits.ptr, logits.size_bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  bool drafts_on_device() const override { return true; }

  // One upload (pack_head_draft), the taps' feature into round 0's input states, then per round:
  // its rows' tokens from the earlier draws and their input states from the earlier rounds'
  // outputs, the layer, its logit rows laid into the target's vocabulary, their draws
  // (enqueue_round_draws) and, of dynamic trees, the next batch of nodes with the next round's
  // rows and state feeds (launch_grow_dynamic); events before the first round and after each.
  std::shared_ptr<const DeviceDraws> enqueue_draft(const DraftRounds& draft, std::span<const int> state_feeds,
                                                   std::span<const float> taps, PageStorage& pages,
                                                   Workspace& workspace) const override {
    const HeadConfig& c = config();
    const int vocab = c.layer.vocab_size, hidden = c.hidden_size();
    check_draft_rounds(draft, vocab);
    check_state_feeds(draft, state_feeds);
    const std::size_t first_rows = draft.rounds() > 0 ? static_cast<std::size_t>(draft.batches[0].num_rows()) : 0;
    const std::size_t taps_width = static_cast<std::size_t>(c.num_taps() * c.target_hidden_size);
    SPECULA_CHECK(taps.size() == first_rows * taps_width, "head device draft: taps hold ", taps.size(),
                  " floats; round 0's ", first_rows, " rows need ", first_rows * taps_width);
    check_pages(pages);
    HeadCudaWorkspace& s = head_workspace(workspace);
    const cudaStream_t stream = s.stream;
    CUDA_CHECK(cudaStreamSynchronize(stream));  // no queued work still reads the buffers or the staging
    s.draft_marks.begin(draft.rounds());
    const DeviceKvPages& device_pages = device_pages_after_copies(pages, account_, s.copies, stream);
    const HeadDraftUpload up = pack_head_draft(draft, state_feeds, taps, vocab, options_, device_pages.id());
    const DraftUpload& d = up.draft;
    int widest = 0, most_logits = 0;
    for (const StepUpload& step : d.steps) {
      check_keys(step);
      widest = std::max(widest, step.key.num_rows);
      most_logits = std::max(most_logits, step.key.num_logits);
    }
    const std::size_t f = sizeof(float), h = static_cast<std::size_t>(hidden), v = static_cast<std::size_t>(vocab);
    grow_layer(s, widest, most_logits);
    grow(s.draft, d.device_bytes, 1 << 20);
    grow(s.states_in, static_cast<std::size_t>(draft.rows()) * h * f);
    grow(s.states_out, static_cast<std::size_t>(draft.rows()) * h * f);
    grow(s.spread, static_cast<std::size_t>(most_logits) * v * f);
    s.draft_staging.reserve(align_up(d.upload_bytes, 1 << 20));
    std::memcpy(s.draft_staging.ptr, d.data.data(), d.upload_bytes);
    unsigned char* base = s.draft.as<unsigned char>();
    const auto ints = [base](std::size_t at) { return reinterpret_cast<int*>(base + at); };
    float *states_in = s.states_in.as<float>(), *states_out = s.states_out.as<float>();
    CUDA_CHECK(cudaEventRecord(s.draft_marks.events[0], stream));
    CUDA_CHECK(cudaMemcpyAsync(base + d.upload_at, s.draft_staging.ptr, d.upload_bytes, cudaMemcpyHostToDevice, stream));
    enqueue_project(reinterpret_cast<const float*>(base + up.taps), states_in, static_cast<int>(first_rows), stream);
    for (int r = 0; r < draft.rounds(); ++r) {
      const std::size_t ru = static_cast<std::size_t>(r);
      const StepUpload& step = d.steps[ru];
      auto* upload = reinterpret_cast<std::int32_t*>(base + d.step_at[ru]);
      const int n = step.key.num_rows;
      const std::size_t first = static_cast<std::size_t>(d.first_row[ru]);
      if (r > 0) {
        launch_gather_tokens(ints(d.at.tokens), ints(d.feeds_of(r)), upload + step.layout.rows, kRowDescInts, n, false,
                             stream);
        launch_copy_rows(states_out, hidden, ints(up.state_feeds) + first, states_in + first * h, hidden, n, hidden,
                         stream);
      }
      enqueue_layer(step, upload, states_in + first * h, states_out + first * h, device_pages.view(), s);
      launch_spread_columns(s.logits.as<float>(), c.draft_vocab_size, draft_to_target_.as<int>(),
                            -std::numeric_limits<float>::infinity(), s.spread.as<float>(), vocab, step.key.num_logits,
                            stream);
      const float* probs = enqueue_round_draws(d, r, draft.keep_q, base, s.spread.as<float>(), vocab, stream);
      if (d.dynamic.on()) {
        DynamicTreeArgs a = dynamic_tree_args(d, r, base, probs, ints(d.at.tokens) + d.first_draw[ru], vocab, 0);
        if (a.next_rows) {
          a.next_state_rows = ints(up.state_feeds) + d.first_row[ru + 1];
          a.first_rows = static_cast<int>(first_rows);
        }
        launch_grow_dynamic(a, stream);
      }
      CUDA_CHECK(cudaEventRecord(s.draft_marks.events[ru + 1], stream));
    }
    DrawsAt at{ints(d.at.tokens), draft.keep_q ? reinterpret_cast<const float*>(base + d.at.probs) : nullptr};
    if (d.dynamic.on()) {
      at.node_tokens = ints(d.at.node_tokens);
      at.node_parents = ints(d.at.node_parents);
    }
    return std::make_shared<CudaDraws>(s.draft_marks, draft.draw_rows(), draft.keep_q, draft.rounds(),
                                       draft.dynamic.budget, draft.dynamic_nodes(), at);
  }

 private:
  // Throws SpeculaError unless `pages` have the head's device layout (kv_layout()).
  void check_pages(const PageStorage& pages) const {
    const KvLayout& layout = pages.layout();
    SPECULA_CHECK(layout.kv_dim() == config().layer.kv_dim() && layout.num_layers == 1 && layout.device_pages &&
                      layout.dtype == KvDType::kF32,
                  "head forward: the KV pages do not have the head's device layout (HeadBackend::kv_layout)");
  }

  // Throws SpeculaError unless the attention kernel's shared memory holds the keys a row of
  // `up` sees.
  void check_keys(const StepUpload& up) const {
    const int head_dim = config().layer.head_dim();
    SPECULA_CHECK(attention_smem_bytes(up.key.keys_cap, head_dim) <= static_cast<std::size_t>(max_smem_),
                  "head forward on backend 'cuda': a row sees ", up.max_keys,
                  " keys; the attention kernel's shared memory (", max_smem_, " bytes) holds ",
                  max_attention_keys(static_cast<std::size_t>(max_smem_), head_dim), " at most");
  }

  // Throws SpeculaError unless state_feeds has a row of `draft`'s rounds each, -1 for round 0's
  // and an earlier round's row for every later one's.
  static void check_state_feeds(const DraftRounds& draft, std::span<const int> state_feeds) {
    SPECULA_CHECK(state_feeds.size() == static_cast<std::size_t>(draft.rows()), "head device draft: ",
                  state_feeds.size(), " state feeds for ", draft.rows(), " rows");
    int row = 0, round_first = 0;
    for (int r = 0; r < draft.rounds(); ++r) {
      for (int i = 0; i < draft.batches[static_cast<std::size_t>(r)].num_rows(); ++i, ++row) {
        const int feed = state_feeds[static_cast<std::size_t>(row)];
        SPECULA_CHECK(r == 0 ? feed == -1 : feed >= 0 && feed < round_first, "head device draft: row ", row,
                      " (round ", r, ") takes the state of row ", feed, "; need ",
                      r == 0 ? "-1 in round 0" : "a row of an earlier round");
      }
      round_first = row;
    }
  }

  // The head's feature of n rows of taps (device) into x (device), on `stream`.
  void enqueue_project(const float* taps, float* x, int n, cudaStream_t stream) const {
    const HeadConfig& c = config();
    const int hidden = c.hidden_size();
    if (eagle1_)  // the feature: the target's last hidden state after the target's final norm
      launch_rms_norm(taps, nullptr, final_norm_.as<float>(), final_norm_eps_, x, n, hidden, stream);
    else
      launch_linear(taps, fc_.as<__nv_bfloat16>(), nullptr, x, n, c.num_taps() * c.target_hidden_size, hidden, false,
                    gemm_, stream);
  }

  // The layer's scratch grown for n rows and num_logits logit rows.
  void grow_layer(HeadCudaWorkspace& s, int n, int num_logits) const {
    const ModelConfig& l = config().layer;
    const std::size_t f = sizeof(float), rows = static_cast<std::size_t>(n), width = static_cast<std::size_t>(l.hidden_size);
    grow(s.a, rows * 2 * width * f);
    grow(s.h, rows * width * f);
    grow(s.t, rows * width * f);
    grow(s.qkv, rows * static_cast<std::size_t>(l.q_dim() + 2 * l.kv_dim()) * f);
    grow(s.attn, rows * static_cast<std::size_t>(l.q_dim()) * f);
    grow(s.gu, rows * 2 * static_cast<std::size_t>(l.intermediate_size) * f);
    grow(s.act, rows * static_cast<std::size_t>(l.intermediate_size) * f);
    grow(s.last, static_cast<std::size_t>(num_logits) * width * f);
    grow(s.logits, static_cast<std::size_t>(num_logits) * static_cast<std::size_t>(config().draft_vocab_size) * f);
  }

  // The layer over the rows of `up` (its data at `upload` on the device) on the workspace's
  // stream: their input states xs, every row's output state into res (EAGLE-3: before the final
  // norm), the logit rows' draft-vocabulary logits into s.logits.
  //   xs: in [rows, hidden]; res: out [rows, hidden] (may not alias xs)
  void enqueue_layer(const StepUpload& up, const std::int32_t* upload, const float* xs, float* res,
                     const DevicePagesView& pages, HeadCudaWorkspace& s) const {
    const HeadConfig& c = config();
    const ModelConfig& l = c.layer;
    const int n = up.key.num_rows, num_logits = up.key.num_logits;
    const int hidden = l.hidden_size, q_dim = l.q_dim(), kv_dim = l.kv_dim(), ffn = l.intermediate_size;
    const int qkv_width = q_dim + 2 * kv_dim, head_dim = l.head_dim();
    const cudaStream_t stream = s.stream;
    const auto* row_descs = reinterpret_cast<const RowDesc*>(upload + up.layout.rows);
    const float eps = l.rms_norm_eps;
    float *a = s.a.as<float>(), *h = s.h.as<float>(), *t = s.t.as<float>(), *qkv = s.qkv.as<float>();
    float* attn = s.attn.as<float>();

    // EAGLE-3: a = cat(input_layernorm(embedding), hidden_norm(x)), the attention's input; the
    // residual is x or hidden_norm(x). EAGLE-1: a = cat(embedding, x); the residual fc(a) + bias
    // is also the attention's input.
    launch_embed(embed_.ptr, embed_view_.dtype, row_descs, h, n, hidden, stream);
    if (eagle1_) {
      launch_copy_rows(h, hidden, nullptr, a, 2 * hidden, n, hidden, stream);
      launch_copy_rows(xs, hidden, nullptr, a + hidden, 2 * hidden, n, hidden, stream);
      launch_linear(a, fc_.as<__nv_bfloat16>(), fc_bias_.as<float>(), res, n, 2 * hidden, hidden, false, gemm_, stream);
    } else {
      launch_rms_norm(h, nullptr, input_norm_.as<float>(), eps, t, n, hidden, stream);
      launch_copy_rows(t, hidden, nullptr, a, 2 * hidden, n, hidden, stream);
      launch_rms_norm(xs, nullptr, hidden_norm_.as<float>(), eps, t, n, hidden, stream);
      launch_copy_rows(t, hidden, nullptr, a + hidden, 2 * hidden, n, hidden, stream);
      launch_copy_rows(c.norm_before_residual ? t : xs, hidden, nullptr, res, hidden, n, hidden, stream);
    }
    const float* attention_input = eagle1_ ? res : a;
    launch_linear(attention_input, qkv_.as<__nv_bfloat16>(), nullptr, qkv, n, eagle1_ ? hidden : 2 * hidden, qkv_width,
                  false, gemm_, stream);
    launch_qk_rope_store(qkv, row_descs, inv_freq_.as<float>(), nullptr, nullptr, eps, n, l.num_attention_heads,
                         l.num_key_value_heads, head_dim, pages, 0, stream);
    launch_attention(qkv, qkv_width, row_descs, upload + up.layout.pages, upload + up.layout.mask, n,
                     l.num_attention_heads, l.num_key_value_heads, head_dim, up.key.keys_cap, pages, 0, attn, stream);
    launch_linear(attn, o_.as<__nv_bfloat16>(), nullptr, res, n, q_dim, hidden, true, gemm_, stream);
    launch_rms_norm(res, nullptr, post_norm_.as<float>(), eps, h, n, hidden, stream);
    launch_linear(h, gate_up_.as<__nv_bfloat16>(), nullptr, s.gu.as<float>(), n, hidden, 2 * ffn, false, gemm_, stream);
    launch_silu_mul(s.gu.as<float>(), s.act.as<float>(), n, ffn, stream);
    launch_linear(s.act.as<float>(), down_.as<__nv_bfloat16>(), nullptr, res, n, ffn, hidden, true, gemm_, stream);

    // The rows that want logits side by side (EAGLE-3: normalised by the head's final norm),
    // then one product with lm_head.
    if (num_logits > 0) {
      const int* wanted = upload + up.layout.logit_rows;
      float* last = s.last.as<float>();
      if (eagle1_)
        launch_copy_rows(res, hidden, wanted, last, hidden, num_logits, hidden, stream);
      else
        launch_rms_norm(res, wanted, final_norm_.as<float>(), eps, last, num_logits, hidden, stream);
      launch_linear(last, lm_head_.as<__nv_bfloat16>(), nullptr, s.logits.as<float>(), num_logits, hidden,
                    c.draft_vocab_size, false, gemm_, stream);
    }
  }

  std::shared_ptr<PoolAccount> account_;
  bool eagle1_;
  const TensorView& embed_view_;
  float final_norm_eps_;
  CudaOptions options_;
  GemmScratch gemm_;  // cublas_prefill off: every product is the batch-invariant kernel
  int max_smem_ = 0;
  DeviceBuffer embed_;                           // [vocab, hidden] as stored
  DeviceBuffer fc_;                              // bf16 [hidden, fc input]
  DeviceBuffer qkv_;                             // bf16 [q_dim + 2 kv_dim, attention input]
  DeviceBuffer o_, gate_up_, down_, lm_head_;    // bf16 [hidden, q_dim], [2 ffn, hidden], [hidden, ffn], [draft_vocab, hidden]
  // f32 [hidden] each. EAGLE-3: input_norm_, hidden_norm_, post_norm_, final_norm_ (the
  // head's); EAGLE-1: post_norm_, fc_bias_ and final_norm_ (the target's, for project).
  DeviceBuffer input_norm_, hidden_norm_, post_norm_, final_norm_, fc_bias_;
  DeviceBuffer inv_freq_;                        // f32 [head_dim / 2]
  DeviceBuffer draft_to_target_;                 // int [draft_vocab] each draft id's target id
};

}  // namespace

std::unique_ptr<HeadBackend> make_cuda_head_backend(const HeadModel& head, const Model& target) {
  if (cuda_device_count() == 0)
    throw SpeculaError(head.dir() + ": backend 'cuda': no usable GPU (" + cuda_unavailable_reason() +
                       "); use --backend cpu");
  return std::make_unique<HeadCudaBackend>(head, target);
}

}  // namespace specula::cuda
