#include "engine/cpu/matmul_bf16dot.h"

#include <cmath>

#include "base/error.h"
#include "engine/cpu/matmul.h"

namespace specula::cpu {

double bf16_products_error_bound(double abs_sum, int64_t additions) {
  const double mu = static_cast<double>(additions) * std::ldexp(1.0, -24);
  const double rounding = std::ldexp(1.0, -7) + std::ldexp(1.0, -16);
  return (rounding + mu / (1 - mu) * std::pow(1 + std::ldexp(1.0, -8), 2)) * abs_sum;
}

void bf16dot_round_rows(const float* x, int n, int64_t in, std::vector<uint32_t>& out) {
  const int64_t pairs = (in + 1) / 2;
  out.resize(static_cast<std::size_t>(n * pairs));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t s = 0; s < pairs; ++s) {
      const float* v = x + r * in + 2 * s;
      const uint32_t high = 2 * s + 1 < in ? bf16dot_round(v[1]) : 0u;
      out[static_cast<std::size_t>(r * pairs + s)] = bf16dot_round(v[0]) | high << 16;
    }
}

const char* bf16dot_kernel_name(Bf16DotKernel kernel) {
  switch (kernel) {
    case Bf16DotKernel::avx2: return "avx2";
    case Bf16DotKernel::avx512: return "avx512";
    case Bf16DotKernel::avx512bf16: return "avx512bf16";
  }
  return "?";
}

Bf16DotKernel bf16dot_kernel(MatmulIsa isa) {
  if (isa == MatmulIsa::avx2) return Bf16DotKernel::avx2;
  const bool hardware = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl");
  return hardware ? Bf16DotKernel::avx512bf16 : Bf16DotKernel::avx512;
}

std::vector<Bf16DotKernel> supported_bf16dot_kernels() {
  std::vector<Bf16DotKernel> kernels;
  for (MatmulIsa isa : supported_matmul_isas()) {
    kernels.push_back(isa == MatmulIsa::avx2 ? Bf16DotKernel::avx2 : Bf16DotKernel::avx512);
    if (bf16dot_kernel(isa) == Bf16DotKernel::avx512bf16) kernels.push_back(Bf16DotKernel::avx512bf16);
  }
  return kernels;
}

MatmulIsa bf16dot_kernel_isa(Bf16DotKernel kernel) {
  return kernel == Bf16DotKernel::avx2 ? MatmulIsa::avx2 : MatmulIsa::avx512;
}

void matmul_bf16dot(const float* x, const PackedWeights& w, float* y, int n, Bf16DotKernel kernel) {
  SPECULA_CHECK(w.dtype() == DType::BF16 && w.isa() == bf16dot_kernel_isa(kernel), "matmul_bf16dot: weights packed as ",
                dtype_name(w.dtype()), " for ", isa_name(w.isa()), ", the ", bf16dot_kernel_name(kernel),
                " kernel needs BF16 for ", isa_name(bf16dot_kernel_isa(kernel)));
  thread_local std::vector<uint32_t> rows;  // the caller's thread; the workers only read it
  if (kernel == Bf16DotKernel::avx2)
    bf16dot_round_rows(x, n, w.in(), rows);
  else
    bf16dot_round_rows_avx512(x, n, w.in(), rows);
  switch (kernel) {
    case Bf16DotKernel::avx2: return matmul_bf16dot_avx2(rows.data(), w, y, n);
    case Bf16DotKernel::avx512: return matmul_bf16dot_avx512(rows.data(), w, y, n);
    case Bf16DotKernel::avx512bf16: return matmul_bf16dot_avx512bf16(rows.data(), w, y, n);
  }
}

}  // namespace specula::cpu
