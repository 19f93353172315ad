// CudaBackend: the engine seam on GPU 0. Construction plans memory (cuda_plan.h), uploads the
// weight arena once; each forward runs the pending KV copies (one kernel), uploads the step
// (one copy), replays or captures the decode graph of its shape, and copies back only the
// logit rows; forward_verify then verifies on the device, its own graph replayed by shape;
// forward_draft runs draft rounds back to back, their tokens drawn and fed on the device, each
// round a graph replayed by shape.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/cuda_draws.cuh"
#include "engine/cuda/device.h"
#include "engine/cuda/device_memory.cuh"
#include "engine/cuda/device_weights.cuh"
#include "engine/cuda/draft_plan.h"
#include "engine/cuda/kernels.cuh"
#include "engine/cuda/verify_plan.h"

namespace specula::cuda {
namespace {

// Graphs instantiated and not yet destroyed, in every workspace of the process.
std::atomic<std::size_t> live_graphs{0};

// What `enqueue` puts on `stream`, captured (global mode) and instantiated as one graph.
template <class Enqueue>
cudaGraphExec_t capture_graph(cudaStream_t stream, Enqueue enqueue) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(err);
  return exec;
}

// Graphs by shape: a shape is captured at its `sights`-th sight (at the second, shapes that
// never repeat, as a dynamic tree's, cost no capture) and replayed from then on; at most `max`
// are kept, the least recently replayed going first, and none that holds device pages that are
// gone.
class ShapeGraphs {
 public:
  using Shape = std::vector<std::size_t>;
  explicit ShapeGraphs(int sights) : sights_(sights) {}
  ShapeGraphs(const ShapeGraphs&) = delete;
  ShapeGraphs& operator=(const ShapeGraphs&) = delete;
  ~ShapeGraphs() { clear(); }

  // The graph of `shape` on `stream` (replayed at step `now`), captured from `enqueue` at the
  // shape's sights-th sight; nullptr when it is not captured (the caller enqueues the work).
  // `pages`: the device pages the work writes, or empty when it writes none.
  template <class Enqueue>
  cudaGraphExec_t find_or_capture(const Shape& shape, cudaStream_t stream, std::uint64_t now,
                                  std::weak_ptr<const void> pages, Enqueue enqueue) {
    auto it = graphs_.find(shape);
    if (it == graphs_.end() && (sights_ == 1 || !seen_.insert(shape).second)) {
      CUDA_CHECK(cudaStreamSynchronize(stream));  // no graph dropped below is still queued
      make_room();
      const bool holds_pages = !pages.expired();
      it = graphs_.emplace(shape, Entry{capture_graph(stream, enqueue), std::move(pages), holds_pages, 0}).first;
      ++live_graphs;
    }
    if (seen_.size() > 4 * max) seen_.clear();
    if (it == graphs_.end()) return nullptr;
    it->second.last_used = now;
    return it->second.exec;
  }
  // Drops every graph (their buffers are about to move); the shapes seen are forgotten.
  void clear() {
    for (auto& [shape, entry] : graphs_) destroy(entry);
    graphs_.clear();
    seen_.clear();
  }

  std::size_t max = 0;

 private:
  struct Entry {
    cudaGraphExec_t exec = nullptr;
    std::weak_ptr<const void> pages;
    bool holds_pages = false;
    std::uint64_t last_used = 0;
  };
  static void destroy(Entry& entry) {
    cudaGraphExecDestroy(entry.exec);
    --live_graphs;
  }
  // Room for one more: those of freed pages go, then the least recently replayed.
  void make_room() {
    for (auto it = graphs_.begin(); it != graphs_.end();) {
      if (!it->second.holds_pages || !it->second.pages.expired()) {
        ++it;
        continue;
      }
      destroy(it->second);
      it = graphs_.erase(it);
    }
    if (graphs_.size() < max || graphs_.empty()) return;
    auto oldest = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    destroy(oldest->second);
    graphs_.erase(oldest);
  }

  int sights_;
  std::map<Shape, Entry> graphs_;
  std::set<Shape> seen_;  // shapes seen and not captured (sights 2)
};

// One stream's scratch: activations, the step upload, the graphs captured on it (at most
// max_graphs each of forwards, verifications and draft rounds; none of pages that are gone).
struct CudaWorkspace : Workspace {
  cudaStream_t stream = nullptr;
  DeviceBuffer x, h, qkv, attn, gu, act, last, logits, upload, copies, x_bf16, tmp, cublas;
  PinnedBuffer host_upload;
  DeviceBuffer verify;             // forward_verify's upload, outputs and scratch (VerifyUpload)
  PinnedBuffer verify_staging;     // its upload on the host, [upload_bytes]
  PinnedBuffer verify_back;        // what comes back of it, [result_ints] int, then from logprobs_back_at its log-probabilities
  std::vector<int> verify_result;  // the same, read after the synchronisation
  cudaEvent_t marks[3] = {};       // forward_verify's start, forward done, verification done
  DeviceBuffer draft;              // forward_draft's upload and outputs (DraftUpload)
  PinnedBuffer draft_staging;      // its upload on the host, [upload_bytes]
  DrawMarks draft_marks;           // around forward_draft's rounds
  DeviceBuffer draw_feeds;               // forward_verify's gather indices into device draws (DrawGather)
  PinnedBuffer draw_feeds_staging;       // the same on the host
  PinnedBuffer draws_back;               // the draws' tokens, back after the verification
  GemmPlans gemm_plans;
  GemmScratch gemm;
  ShapeGraphs step_graphs{1};    // forwards by GraphKey::shape()
  ShapeGraphs verify_graphs{2};  // verifications by VerifyUpload::shape()
  ShapeGraphs draft_graphs{2};   // draft rounds by DraftUpload::round_shape()
  std::uint64_t steps = 0;       // forwards run, the clock of last_used

  ~CudaWorkspace() override {
    if (stream) cudaStreamSynchronize(stream);
    for (cudaEvent_t e : marks)
      if (e) cudaEventDestroy(e);
    if (stream) cudaStreamDestroy(stream);
  }
};

class CudaBackend : public Backend {
 public:
  CudaBackend(const Model& model, std::optional<MatrixFormat> matrices_as, const CudaOptions& options)
      : Backend(model), options_(options), account_(std::make_shared<PoolAccount>()) {
    account_->owner = "backend 'cuda'";
    account_->setting = "kv_pool_bytes";
    const ModelConfig& c = model.config();
    check_cuda_support(c, matrices_as, options);
    CUDA_CHECK(cudaSetDevice(0));
    plan_ = plan_weights(model);
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    memory_ = plan_memory(plan_, c, options, free_bytes, total_bytes);
    account_->capacity = memory_.kv_pool;
    CUDA_CHECK(cudaDeviceGetAttribute(&max_smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    prepare_attention(max_smem_);
    CUBLAS_CHECK(cublasLtCreate(&cublas_));
    upload_weights();
  }
  ~CudaBackend() override {
    if (cublas_) cublasLtDestroy(cublas_);
  }

  BackendKind kind() const override { return BackendKind::kCuda; }
  std::size_t weight_bytes() const override { return plan_.matrix_bytes; }
  KvLayout kv_layout(int block_size) const override {
    KvLayout layout = model().kv_layout(block_size);
    layout.dtype = options_.kv_dtype;
    layout.device_pages = true;
    return layout;
  }

  std::unique_ptr<Workspace> make_workspace() const override {
    const ModelConfig& c = config();
    auto ws = std::make_unique<CudaWorkspace>();
    const std::size_t rows = static_cast<std::size_t>(options_.max_rows);
    const std::size_t logit_rows = static_cast<std::size_t>(options_.max_logit_rows);
    const std::size_t hidden = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.intermediate_size;
    const std::size_t widest = std::max({hidden, q_dim, ffn}), widest_out = std::max({q_dim + 2 * kv_dim, 2 * ffn, hidden});
    CUDA_CHECK(cudaStreamCreateWithFlags(&ws->stream, cudaStreamNonBlocking));
    for (cudaEvent_t& e : ws->marks) CUDA_CHECK(cudaEventCreate(&e));
    for (ShapeGraphs* graphs : {&ws->step_graphs, &ws->verify_graphs, &ws->draft_graphs})
      graphs->max = static_cast<std::size_t>(options_.max_graphs);
    ws->x = DeviceBuffer(rows * hidden * 4);
    ws->h = DeviceBuffer(rows * hidden * 4);
    ws->qkv = DeviceBuffer(rows * (q_dim + 2 * kv_dim) * 4);
    ws->attn = DeviceBuffer(rows * q_dim * 4);
    ws->gu = DeviceBuffer(rows * 2 * ffn * 4);
    ws->act = DeviceBuffer(rows * ffn * 4);
    ws->x_bf16 = DeviceBuffer(rows * widest * 2);
    ws->tmp = DeviceBuffer(rows * widest_out * 4);
    ws->last = DeviceBuffer(logit_rows * hidden * 4);
    ws->logits = DeviceBuffer(logit_rows * static_cast<std::size_t>(c.vocab_size) * 4);
    ws->upload = DeviceBuffer(kPlannedUploadBytes);
    ws->host_upload.reserve(kPlannedUploadBytes);
    ws->cublas = DeviceBuffer(kCublasWorkspace);
    ws->gemm = GemmScratch{options_.cublas_prefill, &ws->gemm_plans, cublas_, ws->cublas.ptr, ws->x_bf16.as<__nv_bfloat16>(), ws->tmp.as<float>()};
    return ws;
  }

  void forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
               std::span<float> logits, const StateTaps& taps) const override {
    CudaWorkspace& ws = cuda_workspace(workspace);
    enqueue_forward(batch, plan, pages, ws, logits, taps);
    if (!logits.empty())
      CUDA_CHECK(cudaMemcpyAsync(logits.data(), ws.logits.ptr, logits.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                 ws.stream));
    CUDA_CHECK(cudaStreamSynchronize(ws.stream));  // the pinned upload and the logits are free again
  }

  bool verifies_on_device() const override { return true; }

  // The forward, then on the same stream the verification (enqueue_verify; replayed as a graph
  // from the second step of its shape), then the unverified spans' logit rows back. Trees of
  // device draws (DeviceVerify::draws): the stream waits for their rounds, their tokens are
  // gathered into the step's rows before the forward and into the verification's nodes (q into
  // its rows) after its upload, and the draws' tokens come back with the verdicts. Of dynamic
  // trees, their rows' positions and masks are written from their parents (launch_tree_rows)
  // and the parents gathered into the verification's; the parents come back too, and the
  // rounds' children, read for refusals.
  DeviceTimes forward_verify(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, Workspace& workspace,
                             std::span<float> logits, const StateTaps& taps, std::span<const DeviceVerify> verify,
                             std::span<DeviceVerdict> verdicts) const override {
    const int vocab = config().vocab_size;
    SPECULA_CHECK(verdicts.size() == verify.size(), "forward_verify: ", verdicts.size(), " verdicts for ", verify.size(),
                  " verified sequences");
    const VerifyUpload up = pack_verify(batch, verify, vocab);
    CudaWorkspace& ws = cuda_workspace(workspace);
    const cudaStream_t s = ws.stream;
    const DrawFeeds feeds = plan_draw_feeds(batch, verify, up);
    if (!feeds.gathers.empty()) {
      CUDA_CHECK(cudaStreamSynchronize(s));  // the feeds' buffers are free again
      const std::size_t bytes = feeds.indices.size() * sizeof(int);
      grow(ws.draw_feeds, bytes, 1 << 16);
      ws.draw_feeds_staging.reserve(align_up(bytes, 1 << 16));
      ws.draws_back.reserve(align_up(feeds.back * sizeof(int), 1 << 16));
      std::memcpy(ws.draw_feeds_staging.ptr, feeds.indices.data(), bytes);
      CUDA_CHECK(cudaMemcpyAsync(ws.draw_feeds.ptr, ws.draw_feeds_staging.ptr, bytes, cudaMemcpyHostToDevice, s));
      for (const DrawGather& g : feeds.gathers) CUDA_CHECK(cudaStreamWaitEvent(s, g.draws->done(), 0));
    }
    const int* feed_index = ws.draw_feeds.as<int>();
    const auto feed_rows = [&](std::int32_t* upload, const StepLayout& layout) {
      for (const DrawGather& g : feeds.gathers) {
        launch_gather_tokens(g.draws->tokens(), feed_index + g.rows_at, upload + layout.rows, kRowDescInts,
                             batch.num_rows(), false, s);
        if (g.draws->tree_budget() > 0)
          launch_tree_rows(TreeRowsArgs{static_cast<int>(g.trees.size() / 2), g.draws->tree_budget(),
                                        config().sliding_window, feed_index + g.trees_at, g.draws->tokens(),
                                        g.draws->parents(), reinterpret_cast<RowDesc*>(upload + layout.rows),
                                        upload + layout.mask},
                           s);
      }
    };
    CUDA_CHECK(cudaEventRecord(ws.marks[0], s));
    enqueue_forward(batch, plan, pages, ws, logits, taps, feed_rows);
    CUDA_CHECK(cudaEventRecord(ws.marks[1], s));
    const std::size_t result_bytes =
        logprobs_back_at(up) + (up.logprobs ? static_cast<std::size_t>(up.contexts) * sizeof(EmittedLogprob) : 0);
    if (ws.verify.bytes < up.device_bytes || ws.verify_staging.bytes < up.data.size() ||
        ws.verify_back.bytes < result_bytes) {
      CUDA_CHECK(cudaStreamSynchronize(s));  // the old buffers may still be read by queued work
      ws.verify_graphs.clear();              // which hold their addresses
      grow(ws.verify, up.device_bytes, 1 << 20);
      ws.verify_staging.reserve(align_up(up.data.size(), 1 << 20));
      ws.verify_back.reserve(align_up(result_bytes, 1 << 16));
    }
    std::memcpy(ws.verify_staging.ptr, up.data.data(), up.data.size());  // the stream reads it only after this
    enqueue_verify_inputs(up, ws, feeds);
    const cudaGraphExec_t graph =
        options_.graphs ? ws.verify_graphs.find_or_capture(up.shape(), s, ws.steps, {}, [&] { enqueue_verify(up, ws); })
                        : nullptr;
    if (graph)
      CUDA_CHECK(cudaGraphLaunch(graph, s));
    else
      enqueue_verify(up, ws);
    CUDA_CHECK(cudaEventRecord(ws.marks[2], s));
    const float* device_logits = ws.logits.as<float>();
    const std::size_t v = static_cast<std::size_t>(vocab);
    for (const VerifyUpload::Run& run : up.host_runs)
      CUDA_CHECK(cudaMemcpyAsync(logits.data() + static_cast<std::size_t>(run.logit_row) * v,
                                 device_logits + static_cast<std::size_t>(run.logit_row) * v,
                                 static_cast<std::size_t>(run.rows) * v * sizeof(float), cudaMemcpyDeviceToHost, s));
    int* drawn_back = static_cast<int*>(ws.draws_back.ptr);
    for (const DrawGather& g : feeds.gathers) {
      const std::size_t n = static_cast<std::size_t>(g.draws->draws());
      CUDA_CHECK(cudaMemcpyAsync(drawn_back + g.back_at, g.draws->tokens(), n * sizeof(int), cudaMemcpyDeviceToHost, s));
      if (g.draws->tree_budget() == 0) continue;
      CUDA_CHECK(cudaMemcpyAsync(drawn_back + g.back_at + n, g.draws->parents(), n * sizeof(int), cudaMemcpyDeviceToHost, s));
      CUDA_CHECK(cudaMemcpyAsync(drawn_back + g.back_at + 2 * n, g.draws->children_drawn(),
                                 static_cast<std::size_t>(g.draws->children()) * sizeof(int), cudaMemcpyDeviceToHost, s));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (const DrawGather& g : feeds.gathers) {
      const int* children = drawn_back + g.back_at + 2 * static_cast<std::size_t>(g.draws->draws());
      for (std::size_t d = 0; d < static_cast<std::size_t>(g.draws->children()); ++d)
        SPECULA_CHECK(children[d] != -1, refused_draw(d));
    }
    const int* back = static_cast<const int*>(ws.verify_back.ptr);
    ws.verify_result.assign(back, back + up.result_ints());
    const auto* logprobs_back = reinterpret_cast<const EmittedLogprob*>(static_cast<const unsigned char*>(ws.verify_back.ptr) +
                                                                       logprobs_back_at(up));
    std::vector<DeviceVerdict> out = unpack_verdicts(
        up, verify, ws.verify_result,
        std::span<const EmittedLogprob>(logprobs_back, up.logprobs ? static_cast<std::size_t>(up.contexts) : 0));
    for (std::size_t i = 0; i < verify.size(); ++i) {
      if (!verify[i].draws) continue;
      const DrawGather& g = feeds.gathers[static_cast<std::size_t>(feeds.gather_of[i])];
      const int* drawn = drawn_back + g.back_at;
      const int* grown = drawn + g.draws->draws();  // dynamic trees' parents
      for (const int d : verify[i].node_draws) {
        SPECULA_CHECK(drawn[d] != -1, refused_draw(static_cast<std::size_t>(d)));
        out[i].drafted.push_back(drawn[d]);
        if (g.draws->tree_budget() > 0) out[i].parents.push_back(grown[d]);
      }
    }
    std::move(out.begin(), out.end(), verdicts.begin());
    float forward_ms = 0, verify_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&forward_ms, ws.marks[0], ws.marks[1]));
    CUDA_CHECK(cudaEventElapsedTime(&verify_ms, ws.marks[1], ws.marks[2]));
    return DeviceTimes{forward_ms * 1e-3, verify_ms * 1e-3};
  }

  bool drafts_on_device() const override { return true; }

  // The rounds (enqueue_rounds), then one copy back of the tokens (and q, or a dynamic tree's
  // nodes), one synchronisation.
  std::vector<double> forward_draft(const DraftRounds& draft, PageStorage& pages, Workspace& workspace,
                                    std::span<int> tokens, std::span<float> q, std::span<int> parents) const override {
    const std::size_t draws = static_cast<std::size_t>(draft.draws()), v = static_cast<std::size_t>(config().vocab_size);
    const std::size_t q_size = draft.keep_q ? static_cast<std::size_t>(draft.logit_rows()) * v : 0;
    const std::size_t nodes = static_cast<std::size_t>(draft.dynamic_nodes());
    const std::size_t outputs = draft.dynamic.on() ? nodes : draws;
    SPECULA_CHECK(tokens.size() == outputs, "forward_draft: tokens holds ", tokens.size(), " entries for ", outputs,
                  draft.dynamic.on() ? " nodes" : " draws");
    SPECULA_CHECK(q.size() == q_size, "forward_draft: q holds ", q.size(), " floats; need ", q_size);
    SPECULA_CHECK(parents.size() == nodes, "forward_draft: parents holds ", parents.size(), " entries for ", nodes,
                  " dynamic tree nodes");
    CudaWorkspace& ws = cuda_workspace(workspace);
    const DrawsAt out = enqueue_rounds(draft, pages, ws);
    // A dynamic tree's draws are its candidates: read for refusals only.
    std::vector<int> candidates(draft.dynamic.on() ? draws : 0);
    const std::span<int> drawn = draft.dynamic.on() ? std::span<int>(candidates) : tokens;
    CUDA_CHECK(cudaMemcpyAsync(drawn.data(), out.tokens, draws * sizeof(int), cudaMemcpyDeviceToHost, ws.stream));
    if (draft.keep_q)
      CUDA_CHECK(cudaMemcpyAsync(q.data(), out.probs, q.size() * sizeof(float), cudaMemcpyDeviceToHost, ws.stream));
    if (draft.dynamic.on()) {
      CUDA_CHECK(cudaMemcpyAsync(tokens.data(), out.node_tokens, nodes * sizeof(int), cudaMemcpyDeviceToHost, ws.stream));
      CUDA_CHECK(cudaMemcpyAsync(parents.data(), out.node_parents, nodes * sizeof(int), cudaMemcpyDeviceToHost, ws.stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(ws.stream));
    for (std::size_t d = 0; d < draws; ++d) SPECULA_CHECK(drawn[d] != -1, refused_draw(d));
    return ws.draft_marks.seconds(draft.rounds());
  }

  std::shared_ptr<const DeviceDraws> enqueue_draft(const DraftRounds& draft, PageStorage& pages,
                                                   Workspace& workspace) const override {
    CudaWorkspace& ws = cuda_workspace(workspace);
    const DrawsAt out = enqueue_rounds(draft, pages, ws);
    return std::make_shared<CudaDraws>(ws.draft_marks, draft.draw_rows(), draft.keep_q, draft.rounds(),
                                       draft.dynamic.budget, draft.dynamic_nodes(), out);
  }

 private:
  static std::string refused_draw(std::size_t d) {
    return detail::concat("forward_draft: draw ", d,
                          " was refused: its logit row has a NaN or +inf logit, or every logit -inf");
  }

  // Where one source of device draws is gathered from in a forward_verify: int offsets into
  // the feed indices (-1: not from these draws) of the step's rows, [batch rows], the
  // verification's nodes, [nodes], its stochastic contexts' q rows, [stochastic contexts], and
  // of dynamic trees, their root rows and first draws, [trees, 2] (TreeRowsArgs); and where
  // the draws' tokens come back, then a dynamic tree's parents and its rounds' children.
  struct DrawGather {
    const CudaDraws* draws = nullptr;
    std::size_t rows_at = 0, nodes_at = 0, q_at = 0, trees_at = 0, back_at = 0;
    std::vector<int> trees;  // [trees, 2] until laid out at trees_at
    std::size_t back_ints() const {
      const std::size_t n = static_cast<std::size_t>(draws->draws());
      return draws->tree_budget() > 0 ? 2 * n + static_cast<std::size_t>(draws->children()) : n;
    }
  };
  struct DrawFeeds {
    std::vector<DrawGather> gathers;
    std::vector<int> gather_of;  // [verify] its gather, -1 without draws
    std::vector<int> indices;    // the feed indices of every gather
    std::size_t back = 0;        // the ints of every gather that come back
  };

  // The gathers of `verify`'s trees of device draws (one per distinct source), refusing draws
  // of another backend or stale ones.
  static DrawFeeds plan_draw_feeds(const RaggedBatch& batch, std::span<const DeviceVerify> verify, const VerifyUpload& up) {
    DrawFeeds feeds;
    feeds.gather_of.assign(verify.size(), -1);
    const std::size_t rows = static_cast<std::size_t>(batch.num_rows()), nodes = static_cast<std::size_t>(up.nodes);
    const std::size_t q_rows = static_cast<std::size_t>(up.contexts - up.greedy_contexts);
    for (std::size_t i = 0; i < verify.size(); ++i) {
      const DeviceVerify& v = verify[i];
      if (!v.draws) continue;
      const auto* draws = dynamic_cast<const CudaDraws*>(v.draws);
      SPECULA_CHECK(draws != nullptr, "forward_verify: entry ", i, "'s draws were not drawn by the CUDA backend");
      draws->check_current();
      auto g = std::find_if(feeds.gathers.begin(), feeds.gathers.end(),
                            [draws](const DrawGather& x) { return x.draws == draws; });
      if (g == feeds.gathers.end()) {
        DrawGather added{draws, feeds.indices.size(), feeds.indices.size() + rows, feeds.indices.size() + rows + nodes,
                         0, feeds.back, {}};
        feeds.indices.resize(feeds.indices.size() + rows + nodes + q_rows, -1);
        feeds.back += added.back_ints();
        feeds.gathers.push_back(std::move(added));
        g = feeds.gathers.end() - 1;
      }
      feeds.gather_of[i] = static_cast<int>(g - feeds.gathers.begin());
      const std::size_t first_row = static_cast<std::size_t>(batch.row_indptr[static_cast<std::size_t>(v.part)]) + 1;
      if (draws->tree_budget() > 0) g->trees.insert(g->trees.end(), {static_cast<int>(first_row) - 1, v.node_draws[0]});
      const std::size_t first_node = static_cast<std::size_t>(up.first_node[i]);
      for (std::size_t j = 0; j < v.node_draws.size(); ++j) {
        feeds.indices[g->rows_at + first_row + j] = v.node_draws[j];
        feeds.indices[g->nodes_at + first_node + j] = v.node_draws[j];
        if (v.greedy() || !draws->keeps_q()) continue;
        // q at a context is the distribution its children's draws came from.
        const std::size_t row = static_cast<std::size_t>(up.first_context[i] - up.greedy_contexts + v.parents[j] + 1);
        feeds.indices[g->q_at + row] = draws->q_row(v.node_draws[j]);
      }
    }
    for (DrawGather& g : feeds.gathers) {
      g.trees_at = feeds.indices.size();
      feeds.indices.insert(feeds.indices.end(), g.trees.begin(), g.trees.end());
    }
    return feeds;
  }

  // The rounds on the workspace's stream, back to back: one upload (every round's step, the
  // feeds, the logit rows' options and children, the uniforms), then per round the feed kernel
  // (its rows' tokens from the earlier draws), the forward, the sampling kernel over its logit
  // rows and, where rows have children, the children kernel, replayed as one graph from the
  // second round of its shape (DraftUpload::round_shape) where its step is graph-eligible;
  // events before the first round and after each. Starts a new draft generation of the
  // workspace (earlier CudaDraws of it are stale).
  DrawsAt enqueue_rounds(const DraftRounds& draft, PageStorage& pages, CudaWorkspace& ws) const {
    const ModelConfig& c = config();
    const int vocab = c.vocab_size;
    check_draft_rounds(draft, vocab);
    const cudaStream_t s = ws.stream;
    check_pages(pages);
    ws.draft_marks.begin(draft.rounds());
    const DeviceKvPages& device_pages = device_pages_after_copies(pages, account_, ws.copies, s);
    const DraftUpload up = pack_draft(draft, vocab, c.sliding_window, options_, device_pages.id());
    for (const StepUpload& step : up.steps) check_keys(step);
    CUDA_CHECK(cudaStreamSynchronize(s));  // no queued work still reads the draft buffer or its staging
    if (ws.draft.bytes < up.device_bytes) {
      ws.draft_graphs.clear();  // they hold the old buffer's address
      grow(ws.draft, up.device_bytes, 1 << 20);
    }
    ws.draft_staging.reserve(align_up(up.upload_bytes, 1 << 20));
    std::memcpy(ws.draft_staging.ptr, up.data.data(), up.upload_bytes);
    unsigned char* base = ws.draft.as<unsigned char>();
    const auto at = [base](std::size_t offset) { return static_cast<void*>(base + offset); };
    const auto floats = [&](std::size_t offset) { return static_cast<float*>(at(offset)); };
    int* drawn = static_cast<int*>(at(up.at.tokens));
    CUDA_CHECK(cudaEventRecord(ws.draft_marks.events[0], s));
    CUDA_CHECK(cudaMemcpyAsync(at(up.upload_at), ws.draft_staging.ptr, up.upload_bytes, cudaMemcpyHostToDevice, s));
    for (int r = 0; r < draft.rounds(); ++r) {
      const std::size_t ru = static_cast<std::size_t>(r);
      const StepUpload& step = up.steps[ru];
      const auto round = [&] {
        auto* upload = static_cast<std::int32_t*>(at(up.step_at[ru]));
        if (r > 0)
          launch_gather_tokens(drawn, static_cast<const int*>(at(up.feeds_of(r))), upload + step.layout.rows,
                               kRowDescInts, step.key.num_rows, false, s);
        enqueue(step, ws, device_pages.view(), upload);
        const float* probs = enqueue_round_draws(up, r, draft.keep_q, base, ws.logits.as<float>(), vocab, s);
        if (up.dynamic.on())
          launch_grow_dynamic(
              dynamic_tree_args(up, r, base, probs, drawn + up.first_draw[ru], vocab, c.sliding_window), s);
      };
      ++ws.steps;
      const cudaGraphExec_t graph =
          graph_eligible(step.key, options_)
              ? ws.draft_graphs.find_or_capture(up.round_shape(r, draft.keep_q), s, ws.steps, device_pages.liveness(), round)
              : nullptr;
      if (graph)
        CUDA_CHECK(cudaGraphLaunch(graph, s));
      else
        round();
      CUDA_CHECK(cudaEventRecord(ws.draft_marks.events[ru + 1], s));
    }
    DrawsAt out{drawn, draft.keep_q ? floats(up.at.probs) : nullptr};
    if (up.dynamic.on()) {
      out.node_tokens = static_cast<const int*>(at(up.at.node_tokens));
      out.node_parents = static_cast<const int*>(at(up.at.node_parents));
    }
    return out;
  }

  static CudaWorkspace& cuda_workspace(Workspace& workspace) {
    auto* ws = dynamic_cast<CudaWorkspace*>(&workspace);
    SPECULA_CHECK(ws != nullptr, "forward: the workspace was not made by the CUDA backend");
    return *ws;
  }

  // Everything of a forward up to the logits in ws.logits, enqueued on the workspace's stream;
  // `feed_rows`, where given, is enqueued between the step's upload and its forward, with the
  // upload's device address and layout.
  void enqueue_forward(const RaggedBatch& batch, const KvPlan& plan, PageStorage& pages, CudaWorkspace& ws,
                       std::span<float> logits, const StateTaps& taps,
                       const std::function<void(std::int32_t* upload, const StepLayout& layout)>& feed_rows = {}) const {
    const ModelConfig& c = config();
    const int n = batch.num_rows();
    const int num_logits = batch.num_logits();
    SPECULA_CHECK(n > 0 && static_cast<int>(plan.row_slots.size()) == n, "forward: the plan has ", plan.row_slots.size(),
                  " new slots for ", n, " rows");
    SPECULA_CHECK(logits.size() == static_cast<std::size_t>(num_logits) * c.vocab_size, "forward: logits buffer holds ",
                  logits.size(), " floats, need ", static_cast<std::size_t>(num_logits) * c.vocab_size);
    check_pages(pages);
    check_taps(taps, batch, c);
    const DeviceKvPages& device_pages = device_pages_after_copies(pages, account_, ws.copies, ws.stream);

    const StepUpload up = pack_step(batch, plan, c.sliding_window, options_, device_pages.id());
    check_keys(up);
    const std::size_t upload_bytes = up.data.size() * sizeof(std::int32_t);
    if (upload_bytes > ws.upload.bytes) {  // graphs hold the old address
      CUDA_CHECK(cudaStreamSynchronize(ws.stream));
      ws.step_graphs.clear();
      ws.upload = DeviceBuffer(align_up(upload_bytes, 1 << 20));
    }
    ws.host_upload.reserve(upload_bytes);
    std::memcpy(ws.host_upload.ptr, up.data.data(), upload_bytes);
    CUDA_CHECK(cudaMemcpyAsync(ws.upload.ptr, ws.host_upload.ptr, upload_bytes, cudaMemcpyHostToDevice, ws.stream));
    if (feed_rows) feed_rows(ws.upload.as<std::int32_t>(), up.layout);

    ++ws.steps;
    const auto run = [&] { enqueue(up, ws, device_pages.view(), ws.upload.as<std::int32_t>(), taps); };
    const cudaGraphExec_t graph = taps.empty() && graph_eligible(up.key, options_)
                                      ? ws.step_graphs.find_or_capture(up.key.shape(), ws.stream, ws.steps,
                                                                       device_pages.liveness(), run)
                                      : nullptr;
    if (graph)
      CUDA_CHECK(cudaGraphLaunch(graph, ws.stream));
    else
      run();
  }

  // Throws unless `pages` were made with this backend's kv_layout().
  void check_pages(const PageStorage& pages) const {
    const ModelConfig& c = config();
    const KvLayout& layout = pages.layout();
    SPECULA_CHECK(layout.device_pages && layout.dtype == options_.kv_dtype && layout.kv_dim() == c.kv_dim() &&
                      layout.num_layers == c.num_hidden_layers,
                  "forward: the KV cache was not made with the CUDA backend's kv_layout() (device pages in ",
                  name_of(options_.kv_dtype), ")");
  }

  // Throws unless the attention kernel's shared memory holds the keys a row of `up` sees.
  void check_keys(const StepUpload& up) const {
    const std::size_t smem = attention_smem_bytes(up.key.keys_cap, config().head_dim());
    SPECULA_CHECK(smem <= static_cast<std::size_t>(max_smem_), "backend 'cuda': a row sees ", up.max_keys,
                  " keys; the attention kernel's shared memory (", max_smem_, " bytes) holds ",
                  max_attention_keys(static_cast<std::size_t>(max_smem_), config().head_dim()), " at most");
  }

  // The inputs of `up`'s verification on ws.stream, after the forward's logits: its upload
  // and its logit edits (from the pinned staging), then the tokens and q of device draws
  // gathered into its nodes and q rows (`feeds`): what changes from one step of a shape to the
  // next outside the verification's graph (the edits' count; the draws sit in the draft
  // workspace, whose buffers move).
  void enqueue_verify_inputs(const VerifyUpload& up, CudaWorkspace& ws, const DrawFeeds& feeds) const {
    const int vocab = config().vocab_size;
    const cudaStream_t s = ws.stream;
    unsigned char* base = ws.verify.as<unsigned char>();
    CUDA_CHECK(cudaMemcpyAsync(base, ws.verify_staging.ptr, up.upload_bytes, cudaMemcpyHostToDevice, s));
    if (up.edit_bytes > 0)
      CUDA_CHECK(cudaMemcpyAsync(base + up.at.edits, static_cast<unsigned char*>(ws.verify_staging.ptr) + up.upload_bytes,
                                 up.edit_bytes, cudaMemcpyHostToDevice, s));
    const int* feed_index = ws.draw_feeds.as<int>();
    for (const DrawGather& g : feeds.gathers) {
      launch_gather_tokens(g.draws->tokens(), feed_index + g.nodes_at, reinterpret_cast<int*>(base + up.at.tokens), 1,
                           up.nodes, true, s);
      if (g.draws->tree_budget() > 0)
        launch_gather_tokens(g.draws->parents(), feed_index + g.nodes_at, reinterpret_cast<int*>(base + up.at.parents),
                             1, up.nodes, true, s);
      if (g.draws->keeps_q())
        launch_copy_rows(g.draws->probs(), vocab, feed_index + g.q_at, reinterpret_cast<float*>(base + up.at.q), vocab,
                         up.contexts - up.greedy_contexts, vocab, s);
    }
  }

  // The verification of the uploaded inputs (captured as a graph per shape): where logit
  // controls edit rows, the verified logit rows copied into the edited rows and edited there
  // (over the gathered tokens of paths drawn on the device, where those are);
  // the sampling kernel per run of verified (or edited) logit rows (p for stochastic contexts,
  // the argmax for greedy ones, a draw with uniform 0 whose -1 marks a row the CPU refuses), the greedy and the
  // stochastic verification kernels, the result into verify_back; where asked, the emitted
  // tokens' log-probabilities after it.
  void enqueue_verify(const VerifyUpload& up, CudaWorkspace& ws) const {
    const int vocab = config().vocab_size;
    const cudaStream_t s = ws.stream;
    unsigned char* base = ws.verify.as<unsigned char>();
    const auto at = [base](std::size_t offset) { return static_cast<void*>(base + offset); };
    const auto ints = [&](std::size_t offset) { return static_cast<int*>(at(offset)); };
    const auto floats = [&](std::size_t offset) { return static_cast<float*>(at(offset)); };
    const auto doubles = [&](std::size_t offset) { return static_cast<double*>(at(offset)); };
    const std::size_t v = static_cast<std::size_t>(vocab);
    int* sampled = ints(up.at.result);
    float* probs = floats(up.at.probs);
    float* edited = floats(up.at.edited);
    if (up.edits) {
      for (const VerifyUpload::Run& run : up.sample_runs)
        CUDA_CHECK(cudaMemcpyAsync(edited + static_cast<std::size_t>(run.context) * v,
                                   ws.logits.as<float>() + static_cast<std::size_t>(run.logit_row) * v,
                                   static_cast<std::size_t>(run.rows) * v * sizeof(float), cudaMemcpyDeviceToDevice, s));
      LogitEditArgs e;
      e.rows = up.contexts;
      e.vocab = vocab;
      e.base = base;
      e.edit_rows = static_cast<const PathEditRow*>(at(up.at.edit_rows));
      e.tokens = ints(up.at.tokens);
      e.logits = edited;
      launch_edit_logits(e, s);
    }
    for (const VerifyUpload::Run& run : up.sample_runs)
      launch_sample(up.edits ? edited + static_cast<std::size_t>(run.context) * v
                             : ws.logits.as<float>() + static_cast<std::size_t>(run.logit_row) * v,
                    floats(up.at.temperature) + run.context, ints(up.at.top_k) + run.context,
                    floats(up.at.top_p) + run.context, floats(up.at.min_p) + run.context,
                    doubles(up.at.draw_uniforms) + run.context, run.rows, vocab,
                    probs + static_cast<std::size_t>(run.context) * v, sampled + run.context, s);
    int* counts = sampled + up.contexts;
    int* accepted = counts + up.greedy + up.stochastic;
    int* emitted = accepted + up.nodes;
    if (up.greedy > 0)
      launch_verify_greedy(ints(up.at.greedy_indptr), ints(up.at.tokens), ints(up.at.parents), sampled, up.greedy,
                           counts, accepted, emitted, s);
    if (up.stochastic > 0)
      launch_verify_stochastic(ints(up.at.stochastic_indptr), ints(up.at.tokens) + up.greedy_nodes,
                               ints(up.at.parents) + up.greedy_nodes, ints(up.at.draw),
                               probs + static_cast<std::size_t>(up.greedy_contexts) * v, floats(up.at.q),
                               doubles(up.at.uniforms), ints(up.at.rule), vocab, up.stochastic,
                               static_cast<const long long*>(at(up.at.scratch_first)), doubles(up.at.scratch),
                               counts + up.greedy, accepted + up.greedy_nodes, emitted + up.greedy_contexts, s);
    CUDA_CHECK(cudaMemcpyAsync(ws.verify_back.ptr, sampled, up.result_ints() * sizeof(int), cudaMemcpyDeviceToHost, s));
    if (!up.logprobs) return;
    LogprobArgs lp;
    lp.contexts = up.contexts;
    lp.vocab = vocab;
    lp.sequence = ints(up.at.logprob_sequence);
    lp.source = ints(up.at.logprob_source);
    lp.top = ints(up.at.logprob_top);
    lp.first = ints(up.at.logprob_first);
    lp.counts = counts;
    lp.accepted = accepted;
    lp.emitted = emitted;
    lp.logits = ws.logits.as<float>();
    lp.probs = probs;
    lp.out = reinterpret_cast<EmittedLogprob*>(at(up.at.logprobs));
    launch_emitted_logprobs(lp, s);
    CUDA_CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(ws.verify_back.ptr) + logprobs_back_at(up), lp.out,
                               static_cast<std::size_t>(up.contexts) * sizeof(EmittedLogprob), cudaMemcpyDeviceToHost, s));
  }

  // Where the log-probabilities sit in verify_back: after the result's ints.
  static std::size_t logprobs_back_at(const VerifyUpload& up) { return align_up(up.result_ints() * sizeof(int), 16); }

  struct LayerPointers {
    const __nv_bfloat16 *qkv, *o, *gate_up, *down;
    const float *qkv_bias, *o_bias, *gate_up_bias, *down_bias, *attn_norm, *mlp_norm, *q_norm, *k_norm;
  };

  template <class T>
  const T* tensor(int index) const {
    return index < 0 ? nullptr : reinterpret_cast<const T*>(arena_.as<unsigned char>() + plan_.tensors[index].offset);
  }

  // Converts every tensor to its device dtype on the host and copies the arena up once.
  void upload_weights() {
    const ModelConfig& c = config();
    std::vector<unsigned char> host(plan_.arena_bytes, 0);
    std::vector<float> row;
    for (std::size_t t = 0; t < plan_.tensors.size(); ++t) {
      const WeightTensor& w = plan_.tensors[t];
      unsigned char* dst = host.data() + w.offset;
      if (static_cast<int>(t) == plan_.inv_freq) {
        const cpu::RopeTable rope(c.head_dim(), c.rope_theta, c.rope_scaling);
        std::memcpy(dst, rope.inv_freq().data(), rope.inv_freq().size() * sizeof(float));
        continue;
      }
      const std::size_t elem = dtype_size(w.dtype);
      for (std::size_t s = 0; s < w.sources.size(); ++s) {
        const TensorView* src = w.sources[s];
        const std::int64_t src_rows = w.source_rows[s];
        const std::int64_t cols = w.rows == 1 ? src_rows : w.cols;  // a fused bias: sources side by side
        const std::int64_t src_row_count = w.rows == 1 ? 1 : src_rows;
        if (src && src->dtype == w.dtype) {
          std::memcpy(dst, src->data, static_cast<std::size_t>(src_row_count * cols) * elem);
        } else if (src) {
          const TensorView flat{src->name, src->dtype, {src_row_count, cols}, src->data, src->origin};
          row.resize(static_cast<std::size_t>(cols));
          for (std::int64_t r = 0; r < src_row_count; ++r) {
            cpu::weight_row(flat, r, row.data());
            for (std::int64_t i = 0; i < cols; ++i)
              store_value(row[static_cast<std::size_t>(i)], w.dtype, dst + static_cast<std::size_t>(r * cols + i) * elem);
          }
        }  // a missing part of a fused bias stays zero
        dst += static_cast<std::size_t>(src_row_count * cols) * elem;
      }
    }
    arena_ = upload_bytes(host.data(), host.size());
    for (const LayerTensors& l : plan_.layers)
      layers_.push_back(LayerPointers{tensor<__nv_bfloat16>(l.qkv), tensor<__nv_bfloat16>(l.o),
                                      tensor<__nv_bfloat16>(l.gate_up), tensor<__nv_bfloat16>(l.down),
                                      tensor<float>(l.qkv_bias), tensor<float>(l.o_bias), tensor<float>(l.gate_up_bias),
                                      tensor<float>(l.down_bias), tensor<float>(l.attn_norm), tensor<float>(l.mlp_norm),
                                      tensor<float>(l.q_norm), tensor<float>(l.k_norm)});
  }

  // Copies the rows of the residual stream `x` that `taps` asks for at `layer` to its host buffer.
  //   x: in [num_rows, hidden] device
  void copy_taps(const StateTaps& taps, int layer, const float* x, cudaStream_t stream) const {
    const std::size_t width = static_cast<std::size_t>(config().hidden_size);
    for (std::size_t j = 0; j < taps.layers.size(); ++j) {
      if (taps.layers[j] != layer) continue;
      for (std::size_t i = 0; i < taps.rows.size(); ++i)
        CUDA_CHECK(cudaMemcpyAsync(taps.out.data() + (i * taps.layers.size() + j) * width,
                                   x + static_cast<std::size_t>(taps.rows[i]) * width, width * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
    }
  }

  // The forward pass of cpu_backend.cpp, kernel for kernel, on ws.stream, reading the step from
  // `upload` (up.data on the device); with taps (never in a graph), their copies too.
  void enqueue(const StepUpload& up, CudaWorkspace& ws, const DevicePagesView& pages, const std::int32_t* upload,
               const StateTaps& taps = {}) const {
    const ModelConfig& c = config();
    const int n = up.key.num_rows, num_logits = up.key.num_logits;
    const int hidden = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.intermediate_size;
    const int head_dim = c.head_dim(), qkv_width = q_dim + 2 * kv_dim;
    const float eps = c.rms_norm_eps;
    const auto* rows = reinterpret_cast<const RowDesc*>(upload + up.layout.rows);
    const int* pages_list = upload + up.layout.pages;
    const int* mask = upload + up.layout.mask;
    const int* logit_rows = upload + up.layout.logit_rows;
    float *x = ws.x.as<float>(), *h = ws.h.as<float>(), *qkv = ws.qkv.as<float>(), *attn = ws.attn.as<float>();
    float *gu = ws.gu.as<float>(), *act = ws.act.as<float>();
    const cudaStream_t s = ws.stream;

    const WeightTensor& embed = plan_.tensors[plan_.embed];
    launch_embed(tensor<unsigned char>(plan_.embed), embed.dtype, rows, x, n, hidden, s);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const LayerPointers& w = layers_[static_cast<std::size_t>(l)];
      copy_taps(taps, l, x, s);
      launch_rms_norm(x, nullptr, w.attn_norm, eps, h, n, hidden, s);
      launch_linear(h, w.qkv, w.qkv_bias, qkv, n, hidden, qkv_width, false, ws.gemm, s);
      launch_qk_rope_store(qkv, rows, tensor<float>(plan_.inv_freq), w.q_norm, w.k_norm, eps, n, c.num_attention_heads,
                           c.num_key_value_heads, head_dim, pages, l, s);
      launch_attention(qkv, qkv_width, rows, pages_list, mask, n, c.num_attention_heads, c.num_key_value_heads, head_dim,
                       up.key.keys_cap, pages, l, attn, s);
      launch_linear(attn, w.o, w.o_bias, x, n, q_dim, hidden, true, ws.gemm, s);
      launch_rms_norm(x, nullptr, w.mlp_norm, eps, h, n, hidden, s);
      launch_linear(h, w.gate_up, w.gate_up_bias, gu, n, hidden, 2 * ffn, false, ws.gemm, s);
      launch_silu_mul(gu, act, n, ffn, s);
      launch_linear(act, w.down, w.down_bias, x, n, ffn, hidden, true, ws.gemm, s);
    }
    copy_taps(taps, c.num_hidden_layers, x, s);
    if (num_logits == 0) return;
    float* last = ws.last.as<float>();
    launch_rms_norm(x, logit_rows, tensor<float>(plan_.final_norm), eps, last, num_logits, hidden, s);
    launch_linear(last, tensor<__nv_bfloat16>(plan_.lm_head), nullptr, ws.logits.as<float>(), num_logits, hidden,
                  c.vocab_size, false, ws.gemm, s);
  }

  CudaOptions options_;
  std::shared_ptr<PoolAccount> account_;
  WeightPlan plan_;
  MemoryPlan memory_;
  int max_smem_ = 0;
  cublasLtHandle_t cublas_ = nullptr;
  DeviceBuffer arena_;
  std::vector<LayerPointers> layers_;
};

}  // namespace

std::size_t cuda_live_graphs() { return live_graphs; }

std::unique_ptr<Backend> make_cuda_backend(const Model& model, std::optional<MatrixFormat> matrices_as,
                                           const CudaOptions& options) {
  if (cuda_device_count() == 0)
    throw SpeculaError("backend 'cuda': no usable GPU (" + cuda_unavailable_reason() + "); use --backend cpu");
  return std::make_unique<CudaBackend>(model, matrices_as, options);
}

}  // namespace specula::cuda
