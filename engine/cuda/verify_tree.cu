// The tree-verification kernels (verify_tree.h's flat batch, one block per sequence) and their
// launchers. Each emits exactly what verify/verifier.cpp's verify_greedy / verify_stochastic
// (and verify/block_verifier.cpp's verify_block, verify/traversal_verifier.cpp's
// verify_traversal, for the sequences of those rules) emit for the same inputs: the stochastic kernel repeats verify/residual.cpp's double
// arithmetic operation for operation, in the same order, through the round-to-nearest
// intrinsics (so nvcc contracts nothing), and every sum the CPU takes serially is taken
// serially by thread 0; only elementwise work is spread over the block. It relies on nvcc's
// default -ftz=false (a subnormal p or q entry widens to double exactly, as on the CPU). A node
// of negative token is absent (a draft child that is not there, and so all under it): the
// kernels verify the tree without it, as the CPU verifies the tree of the present nodes with
// their rows and uniforms.
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/kernels.cuh"
#include "engine/cuda/verify_tree.h"

namespace specula::cuda {
namespace {

constexpr int kVerifyThreads = 256;

// ---- device helpers ----

// tree.first_child(context) over one sequence's parents (-1 = none), skipping absent nodes
// (a negative token: a draft child that is not there, kAbsentDraw).
__device__ int first_child(const int* tok, const int* parent, int n, int context) {
  for (int i = context > 0 ? context : 0; i < n; ++i)
    if (parent[i] == context - 1 && tok[i] >= 0) return i;
  return -1;
}

// tree.next_sibling(node) (-1 = none), skipping absent nodes.
__device__ int next_sibling(const int* tok, const int* parent, int n, int node) {
  for (int i = node + 1; i < n; ++i)
    if (parent[i] == parent[node] && tok[i] >= 0) return i;
  return -1;
}

// std::max(v, 0.0): v itself unless v < 0 (so -0.0 and NaN stay).
__device__ __forceinline__ double max_zero(double v) { return v < 0.0 ? 0.0 : v; }

// base/lane_sum.h: eight interleaved partial sums over the full groups of 8, added in lane
// order, then the tail, each added in double. One thread.
template <class T>
__device__ double lane_sum(const T* values, int size) {
  double partial[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  int i = 0;
  for (; i + 8 <= size; i += 8)
    for (int lane = 0; lane < 8; ++lane) partial[lane] = __dadd_rn(partial[lane], static_cast<double>(values[i + lane]));
  double total = 0.0;
  for (int lane = 0; lane < 8; ++lane) total = __dadd_rn(total, partial[lane]);
  for (; i < size; ++i) total = __dadd_rn(total, static_cast<double>(values[i]));
  return total;
}

// Residual::sample's scan: the smallest token whose prefix sum of positive weights (in token
// order) exceeds target, else the last token of positive weight, -1 if none. One thread.
template <class T>
__device__ int sample_scan(const T* weights, int vocab, double target) {
  double cumulative = 0.0;
  int chosen = -1;
  for (int v = 0; v < vocab; ++v) {
    const double w = static_cast<double>(weights[v]);
    if (w <= 0.0) continue;
    cumulative = __dadd_rn(cumulative, w);
    chosen = v;
    if (!(cumulative <= target)) break;
  }
  return chosen;
}

// values[0] + values[1] + ... in order, one add at a time (a CPU loop's `sum += w`), taken by
// thread 0 after a barrier and returned to every thread through `shared`.
__device__ double serial_sum(const double* values, int size, double& shared) {
  __syncthreads();  // every thread's writes of values are done
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int i = 0; i < size; ++i) sum = __dadd_rn(sum, values[i]);
    shared = sum;
  }
  __syncthreads();
  return shared;
}

// The same scan over a probability row read as double (a fresh Residual of the row).
__device__ int sample_row(const float* row, int vocab, double u) {
  const double total = lane_sum(row, vocab);
  if (total <= 0.0) return -1;
  return sample_scan(row, vocab, __dmul_rn(u, total));
}

// Writes the path root-down to `last` (-1: none) and its tokens, then `final_token`. One thread.
__device__ void write_result(const int* tokens, const int* parent, int last, int final_token, int* count,
                             int* accepted_nodes, int* out_tokens) {
  int depth = 0;
  for (int i = last; i >= 0; i = parent[i]) ++depth;
  *count = depth;
  int at = depth;
  for (int i = last; i >= 0; i = parent[i]) {
    --at;
    accepted_nodes[at] = i;
    out_tokens[at] = tokens[i];
  }
  out_tokens[depth] = final_token;
}

// q_c(x) as verify/block_verifier.cpp's draft_prob reads it: the draft row at context c, or
// the point mass on the chain's next token where the context's draw is kTopK.
__device__ __forceinline__ double block_draft_prob(const int* tok, int mode, const float* q_row, int c, int x) {
  if (mode == kDrawTopK) return x == tok[c] ? 1.0 : 0.0;
  return static_cast<double>(q_row[x]);
}

// block_weights' keep_i for the chain's first i tokens (keep_0 = 1), recomputed from the start
// so that no per-depth storage is needed. Every thread.
__device__ double block_keep(const int* tok, const int* draw, const float* p, const float* q, int vocab, int i) {
  double keep = 1.0;
  for (int k = 1; k <= i; ++k) {
    const int c = k - 1, x = tok[c];
    const std::size_t row = static_cast<std::size_t>(c) * vocab;
    const double px = static_cast<double>(p[row + x]);
    const double qx = block_draft_prob(tok, draw[c], draw[c] == kDrawTopK ? nullptr : q + row, c, x);
    if (keep <= 0.0 || px <= 0.0) {
      keep = 0.0;
    } else if (qx <= 0.0) {
      keep = 1.0;
    } else {
      const double ratio = __ddiv_rn(__dmul_rn(keep, px), qx);
      keep = ratio < 1.0 ? ratio : 1.0;  // std::min(1.0, ratio)
    }
  }
  return keep;
}

// r[x] = max(keep p_c(x) - q_c(x), 0) for every token, spread over the block (block_weights'
// rho terms, block_residual's weights).
__device__ void block_residual_weights(const int* tok, const int* draw, const float* p, const float* q, int vocab,
                                       int c, double keep, double* r) {
  const std::size_t row = static_cast<std::size_t>(c) * vocab;
  const float* q_row = draw[c] == kDrawTopK ? nullptr : q + row;
  for (int x = threadIdx.x; x < vocab; x += blockDim.x)
    r[x] = max_zero(__dsub_rn(__dmul_rn(keep, static_cast<double>(p[row + x])), block_draft_prob(tok, draw[c], q_row, c, x)));
}

// verify_block for one chain of n nodes (verify/block_verifier.cpp, operation for operation):
// from i = n down, stop_i (keep_n at the leaf; else rho_i / (rho_i + 1 - keep_i), rho_i's
// terms spread over the block and summed serially in token order by thread 0) against
// uniform i - 1; then the residual max(keep_tau p_tau - q_tau, 0) (p_n itself at tau = n)
// drawn with uniform n + tau, p_tau where the residual is empty. p, q, draw, u start at the
// sequence's first context / uniform; r: [vocab] scratch. Every thread; thread 0 writes.
__device__ void verify_block_chain(const int* tok, const int* par, const int* draw, const float* p, const float* q,
                                   const double* u, int n, int vocab, double* r, double& shared_sum, int* count,
                                   int* accepted_nodes, int* out_tokens) {
  int tau = 0;
  for (int i = n; i >= 1 && tau == 0; --i) {
    const double keep = block_keep(tok, draw, p, q, vocab, i);
    double stop = keep;
    if (i < n) {  // r is free: the last serial_sum's reads ended at its barrier
      block_residual_weights(tok, draw, p, q, vocab, i, keep, r);
      const double rho = serial_sum(r, vocab, shared_sum);
      const double denominator = __dsub_rn(__dadd_rn(rho, 1.0), keep);
      stop = denominator > 0.0 ? __ddiv_rn(rho, denominator) : 0.0;
    }
    if (u[i - 1] < stop) tau = i;
  }
  const float* p_row = p + static_cast<std::size_t>(tau) * vocab;
  const double uc = u[n + tau];
  if (tau < n) {
    block_residual_weights(tok, draw, p, q, vocab, tau, block_keep(tok, draw, p, q, vocab, tau), r);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  int token = -1;
  if (tau < n) {
    const double total = lane_sum(r, vocab);
    token = total <= 0.0 ? -1 : sample_scan(r, vocab, __dmul_rn(uc, total));
  }
  if (token < 0) token = sample_row(p_row, vocab, uc);
  write_result(tok, par, tau - 1, token, count, accepted_nodes, out_tokens);
}

// One open context of verify_traversal's walk (verify/traversal_verifier.cpp's OpenContext):
// m(v) = alpha * weight(v) / mass, the weights being the context's p row until a child is
// deleted (dense: the level's residual array), and the proposal q less the deleted siblings
// (kWithoutReplacement; the level's proposal array, of mass proposal_mass). Every thread holds
// the same copy; a pushed context's parent waits in its level's slot.
struct OpenContext {
  int context, next_child, mode;
  double alpha, mass, proposal_mass;
  bool dense;
};

__device__ void save_context(const OpenContext& c, double* slot) {
  slot[0] = c.context, slot[1] = c.next_child, slot[2] = c.mode;
  slot[3] = c.alpha, slot[4] = c.mass, slot[5] = c.proposal_mass, slot[6] = c.dense ? 1.0 : 0.0;
}

__device__ OpenContext load_context(const double* slot) {
  return {static_cast<int>(slot[0]), static_cast<int>(slot[1]), static_cast<int>(slot[2]), slot[3], slot[4], slot[5],
          slot[6] != 0.0};
}

// OpenContext::m(v).
__device__ __forceinline__ double walk_m(const OpenContext& c, const double* weights, const float* p_row, int v) {
  if (c.mass <= 0.0) return 0.0;
  const double w = c.dense ? weights[v] : static_cast<double>(p_row[v]);
  return __ddiv_rn(__dmul_rn(c.alpha, w), c.mass);
}

// OpenContext::q(v, x): the point mass on x (kTopK), else proposal weight over its mass.
__device__ __forceinline__ double walk_q(const OpenContext& c, const double* proposal, int v, int x) {
  if (c.mode == kDrawTopK) return v == x ? 1.0 : 0.0;
  return __ddiv_rn(proposal[v], c.proposal_mass);
}

// Traversal::open: the context's p row as weights, its q row copied into the level's proposal
// where its children were drawn from q.
__device__ OpenContext open_context(const int* tok, const int* par, const int* draw, const float* q, int n, int vocab,
                                    int context, double alpha, double* proposal) {
  const OpenContext c{context, first_child(tok, par, n, context), draw[context], alpha, 1.0, 1.0, false};
  if (c.next_child >= 0 && c.mode != kDrawTopK) {
    const float* q_row = q + static_cast<std::size_t>(context) * vocab;
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) proposal[v] = static_cast<double>(q_row[v]);
  }
  return c;
}

// Traversal::delete_child: m <- max(m - q_j, 0) in place, a(Y) <- rho / (rho + 1 - a(Y)) with
// rho their serial sum, the mass rho; the child's token leaves a kWithoutReplacement proposal;
// on to the next sibling. The caller's reads of weights are done (a barrier).
__device__ void delete_child(OpenContext& c, const int* tok, const int* par, int n, int vocab, const float* p_row,
                             double* weights, double* proposal, double& shared_sum, int child) {
  const int x = tok[child];
  const double proposal_x = c.mode == kDrawTopK ? 0.0 : proposal[x];
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    weights[v] = max_zero(__dsub_rn(walk_m(c, weights, p_row, v), walk_q(c, proposal, v, x)));
  const double rho = serial_sum(weights, vocab, shared_sum);
  const double denominator = __dsub_rn(__dadd_rn(rho, 1.0), c.alpha);
  c.alpha = denominator > 0.0 ? __ddiv_rn(rho, denominator) : 0.0;
  c.mass = rho;
  c.dense = true;
  if (c.mode == kDrawWithoutReplacement && proposal_x != 0.0) {  // Residual::remove(x)
    c.proposal_mass = max_zero(__dsub_rn(c.proposal_mass, proposal_x));
    if (threadIdx.x == 0) proposal[x] = 0.0;
  }
  c.next_child = next_sibling(tok, par, n, child);
}

// verify_traversal for one tree (verify/traversal_verifier.cpp, operation for operation): the
// walk from the root, each child tested by alpha = min(1, m(x) / q(x)) and opened (pushed) or
// deleted, a context out of children kept where its uniform is below its alpha (or at the
// root) else popped and deleted from its parent; then the kept context's measure drawn with
// its uniform, its p row where the measure is empty. scratch: the sequence's levels
// (verify_tree.h). Every thread; thread 0 writes.
__device__ void verify_traversal_tree(const int* tok, const int* par, const int* draw, const float* p, const float* q,
                                      const double* u, int n, int vocab, double* scratch, double& shared_sum,
                                      int* count, int* accepted_nodes, int* out_tokens) {
  const std::size_t level_doubles = 2 * static_cast<std::size_t>(vocab) + kScratchSlot;  // verify_tree.h
  int level = 0;
  OpenContext c = open_context(tok, par, draw, q, n, vocab, 0, 1.0, scratch + vocab);
  for (;;) {
    __syncthreads();  // the last step's writes are visible, its reads of this level done
    double* weights = scratch + level * level_doubles;
    double* proposal = weights + vocab;
    const float* p_row = p + static_cast<std::size_t>(c.context) * vocab;
    if (c.next_child >= 0) {
      const int child = c.next_child, x = tok[child];
      const double mx = walk_m(c, weights, p_row, x), qx = walk_q(c, proposal, x, x);
      const double ratio = qx <= 0.0 ? 1.0 : __ddiv_rn(mx, qx);
      const double alpha = mx <= 0.0 ? 0.0 : ratio < 1.0 ? ratio : 1.0;  // std::min(1.0, mx / qx)
      if (alpha <= 0.0) {
        __syncthreads();  // every thread has read weights[x] and proposal[x]
        delete_child(c, tok, par, n, vocab, p_row, weights, proposal, shared_sum, child);
      } else {
        if (threadIdx.x == 0) save_context(c, proposal + vocab);
        ++level;
        c = open_context(tok, par, draw, q, n, vocab, child + 1, alpha, weights + level_doubles + vocab);
      }
      continue;
    }
    if (c.context == 0 || u[c.context - 1] < c.alpha) break;
    const int node = c.context - 1;
    --level;
    weights = scratch + level * level_doubles;
    proposal = weights + vocab;
    c = load_context(proposal + vocab);
    delete_child(c, tok, par, n, vocab, p + static_cast<std::size_t>(c.context) * vocab, weights, proposal,
                 shared_sum, node);
  }
  if (threadIdx.x != 0) return;
  const double* weights = scratch + level * level_doubles;
  const float* p_row = p + static_cast<std::size_t>(c.context) * vocab;
  const double uc = u[n + c.context];
  int token = -1;
  if (c.dense) {
    const double total = lane_sum(weights, vocab);
    token = total <= 0.0 ? -1 : sample_scan(weights, vocab, __dmul_rn(uc, total));
  }
  if (token < 0) token = sample_row(p_row, vocab, uc);  // the p row itself, or where the measure is empty
  write_result(tok, par, c.context - 1, token, count, accepted_nodes, out_tokens);
}

// ---- kernels ----

// verify_greedy per sequence: every thread takes nodes i = t, t + blockDim.x, ... and walks
// from i to the root checking tokens[j] == argmax[parent[j] + 1]; the deepest node whose
// whole path agrees wins, ties to the lowest index (the CPU's strict > in node order).
__global__ void verify_greedy_kernel(const int* node_indptr, const int* tokens, const int* parent, const int* argmax,
                                     int* accepted_count, int* accepted_nodes, int* out_tokens) {
  __shared__ int best_depth[kVerifyThreads];
  __shared__ int best_node[kVerifyThreads];
  const int s = blockIdx.x;
  const int first = node_indptr[s], n = node_indptr[s + 1] - first;
  const int* tok = tokens + first;
  const int* par = parent + first;
  const int* arg = argmax + first + s;  // contexts start at first + s (verify_tree.h)
  int depth = 0, node = -1;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    int d = 0;
    bool agrees = true;
    for (int j = i; j >= 0; j = par[j]) {
      if (tok[j] != arg[par[j] + 1]) {
        agrees = false;
        break;
      }
      ++d;
    }
    if (agrees && d > depth) depth = d, node = i;
  }
  best_depth[threadIdx.x] = depth;
  best_node[threadIdx.x] = node;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int t = 1; t < static_cast<int>(blockDim.x); ++t)
    if (best_depth[t] > depth || (best_depth[t] == depth && best_depth[t] > 0 && best_node[t] < node))
      depth = best_depth[t], node = best_node[t];
  write_result(tok, par, node, arg[node + 1], accepted_count + s, accepted_nodes + first, out_tokens + first + s);
}

// verify_stochastic per sequence (verify/verifier.h's rule). At each visited context the
// residual r and the proposal q_j are materialised in the sequence's workspace rows as double
// (a weight the CPU reads from its row view is that float widened, a removed one 0); masses
// follow Residual's updates, and while r is still a view of p its total is lane_sum(p) less
// the removed tokens' p in token order, as Residual::total takes it. Every thread makes the
// same walk (its decisions read only values made visible by a barrier); thread 0 takes the
// serial sums and writes the result.
__global__ void verify_stochastic_kernel(const int* node_indptr, const int* tokens, const int* parent, const int* draw,
                                         const float* p, const float* q, const double* uniforms, const int* rule,
                                         int vocab, const long long* scratch_first, double* workspace,
                                         int* accepted_count, int* accepted_nodes, int* out_tokens) {
  __shared__ double shared_mass;
  const int s = blockIdx.x;
  const int first = node_indptr[s], n = node_indptr[s + 1] - first;
  const int contexts = first + s;  // verify_tree.h's context_offset / uniform_offset
  const int* tok = tokens + first;
  const int* par = parent + first;
  const double* u = uniforms + 2 * first + s;
  double* r = workspace + scratch_first[s];
  double* qj = r + vocab;
  if (rule[s] != kRuleToken) {
    const std::size_t row = static_cast<std::size_t>(contexts) * vocab;
    const float* q_rows = q == nullptr ? nullptr : q + row;
    if (rule[s] == kRuleBlock)
      verify_block_chain(tok, par, draw + contexts, p + row, q_rows, u, n, vocab, r, shared_mass, accepted_count + s,
                         accepted_nodes + first, out_tokens + contexts);
    else
      verify_traversal_tree(tok, par, draw + contexts, p + row, q_rows, u, n, vocab, r, shared_mass,
                            accepted_count + s, accepted_nodes + first, out_tokens + contexts);
    return;
  }
  int context = 0, last = -1;
  for (;;) {
    const int mode = draw[contexts + context];
    const float* p_row = p + static_cast<std::size_t>(contexts + context) * vocab;
    const int child0 = first_child(tok, par, n, context);
    const bool reads_q = child0 >= 0 && mode != kDrawTopK;
    const float* q_row = reads_q ? q + static_cast<std::size_t>(contexts + context) * vocab : nullptr;
    __syncthreads();  // the previous context's reads of r and qj are done
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
      r[v] = static_cast<double>(p_row[v]);
      if (reads_q) qj[v] = static_cast<double>(q_row[v]);
    }
    __syncthreads();
    bool dense = false;  // Residual::subtract has run on r
    double r_mass = 1.0, q_mass = 1.0;
    int accepted = -1;
    for (int child = child0; child >= 0 && accepted < 0; child = next_sibling(tok, par, n, child)) {
      const int x = tok[child];
      const double rx = r[x];
      const double qx = mode == kDrawTopK ? 1.0 : qj[x];
      const double qm = mode == kDrawTopK ? 1.0 : q_mass;
      __syncthreads();  // every thread has read r[x] and qj[x]
      if (__dmul_rn(__dmul_rn(u[child], qx), r_mass) < __dmul_rn(rx, qm)) {
        accepted = child;
      } else if (mode == kDrawTopK) {
        // Residual::remove(x)
        if (rx != 0.0) {
          r_mass = max_zero(__dsub_rn(r_mass, rx));
          if (threadIdx.x == 0) r[x] = 0.0;
        }
      } else {
        // Residual::subtract(q_j): r <- max(r / r.mass - q_j / q_j.mass, 0), mass = the serial sum
        if (!(r_mass <= 0.0 || q_mass <= 0.0)) {
          for (int v = threadIdx.x; v < vocab; v += blockDim.x)
            r[v] = max_zero(__dsub_rn(__ddiv_rn(r[v], r_mass), __ddiv_rn(qj[v], q_mass)));
          r_mass = serial_sum(r, vocab, shared_mass);
          dense = true;
        }
        // q_j.remove(x)
        if (mode == kDrawWithoutReplacement && qx != 0.0) {
          q_mass = max_zero(__dsub_rn(q_mass, qx));
          if (threadIdx.x == 0) qj[x] = 0.0;
        }
      }
      __syncthreads();  // r, qj and shared_mass settled before the next child reads them
    }
    if (accepted >= 0) {
      last = accepted;
      context = accepted + 1;
      continue;
    }
    if (threadIdx.x == 0) {
      // Residual::sample: the total of r (dense: lane_sum of r; a view: lane_sum of p less the
      // removed tokens' p in token order), then the scan; a fresh view of p when r is empty.
      double total;
      if (dense) {
        total = lane_sum(r, vocab);
      } else {
        total = lane_sum(p_row, vocab);
        for (int v = 0; v < vocab; ++v) {
          const double w = static_cast<double>(p_row[v]);
          if (r[v] == 0.0 && w != 0.0) total = __dsub_rn(total, w);
        }
      }
      const double uc = u[n + context];
      int token = total <= 0.0 ? -1 : sample_scan(r, vocab, __dmul_rn(uc, total));
      if (token < 0) token = sample_row(p_row, vocab, uc);
      write_result(tok, par, last, token, accepted_count + s, accepted_nodes + first, out_tokens + contexts);
    }
    return;
  }
}

}  // namespace

// ---- launchers ----

void launch_verify_greedy(const int* node_indptr, const int* tokens, const int* parent, const int* argmax,
                          int num_sequences, int* accepted_count, int* accepted_nodes, int* out_tokens,
                          cudaStream_t stream) {
  if (num_sequences == 0) return;
  SPECULA_LAUNCH(verify_greedy_kernel, dim3(num_sequences), dim3(kVerifyThreads), 0, stream, node_indptr, tokens,
                 parent, argmax, accepted_count, accepted_nodes, out_tokens);
  CUDA_CHECK_LAUNCH();
}

void launch_verify_stochastic(const int* node_indptr, const int* tokens, const int* parent, const int* draw,
                              const float* p, const float* q, const double* uniforms, const int* rule, int vocab,
                              int num_sequences, const long long* scratch_first, double* workspace,
                              int* accepted_count, int* accepted_nodes, int* out_tokens, cudaStream_t stream) {
  if (num_sequences == 0) return;
  SPECULA_LAUNCH(verify_stochastic_kernel, dim3(num_sequences), dim3(kVerifyThreads), 0, stream, node_indptr, tokens,
                 parent, draw, p, q, uniforms, rule, vocab, scratch_first, workspace, accepted_count, accepted_nodes,
                 out_tokens);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specula::cuda
