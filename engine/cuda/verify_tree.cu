// The tree-verification kernels (verify_tree.h's flat batch, one block per sequence) and their
// launchers. Each emits exactly what verify/verifier.cpp's verify_greedy / verify_stochastic
// emit for the same inputs: the stochastic kernel repeats verify/residual.cpp's double
// arithmetic operation for operation, in the same order, through the round-to-nearest
// intrinsics (so nvcc contracts nothing), and every sum the CPU takes serially is taken
// serially by thread 0; only elementwise work is spread over the block. It relies on nvcc's
// default -ftz=false (a subnormal p or q entry widens to double exactly, as on the CPU).
#include "engine/cuda/cuda_check.cuh"
#include "engine/cuda/kernels.cuh"
#include "engine/cuda/verify_tree.h"

namespace specula::cuda {
namespace {

constexpr int kVerifyThreads = 256;

// ---- device helpers ----

// tree.first_child(context) over one sequence's parents (-1 = none).
__device__ int first_child(const int* parent, int n, int context) {
  for (int i = context > 0 ? context : 0; i < n; ++i)
    if (parent[i] == context - 1) return i;
  return -1;
}

// tree.next_sibling(node) (-1 = none).
__device__ int next_sibling(const int* parent, int n, int node) {
  for (int i = node + 1; i < n; ++i)
    if (parent[i] == parent[node]) return i;
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
                                         const float* p, const float* q, const double* uniforms, int vocab,
                                         double* workspace, int* accepted_count, int* accepted_nodes,
                                         int* out_tokens) {
  __shared__ double shared_mass;
  const int s = blockIdx.x;
  const int first = node_indptr[s], n = node_indptr[s + 1] - first;
  const int contexts = first + s;  // verify_tree.h's context_offset / uniform_offset
  const int* tok = tokens + first;
  const int* par = parent + first;
  const double* u = uniforms + 2 * first + s;
  double* r = workspace + static_cast<std::size_t>(s) * 2 * vocab;
  double* qj = r + vocab;
  int context = 0, last = -1;
  for (;;) {
    const int mode = draw[contexts + context];
    const float* p_row = p + static_cast<std::size_t>(contexts + context) * vocab;
    const int child0 = first_child(par, n, context);
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
    for (int child = child0; child >= 0 && accepted < 0; child = next_sibling(par, n, child)) {
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
          __syncthreads();
          if (threadIdx.x == 0) {
            double mass = 0.0;
            for (int v = 0; v < vocab; ++v) mass = __dadd_rn(mass, r[v]);
            shared_mass = mass;
          }
          __syncthreads();
          r_mass = shared_mass;
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
                              const float* p, const float* q, const double* uniforms, int vocab, int num_sequences,
                              double* workspace, int* accepted_count, int* accepted_nodes, int* out_tokens,
                              cudaStream_t stream) {
  if (num_sequences == 0) return;
  SPECULA_LAUNCH(verify_stochastic_kernel, dim3(num_sequences), dim3(kVerifyThreads), 0, stream, node_indptr, tokens,
                 parent, draw, p, q, uniforms, vocab, workspace, accepted_count, accepted_nodes, out_tokens);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specula::cuda
