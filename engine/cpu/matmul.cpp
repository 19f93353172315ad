#include "engine/cpu/matmul.h"

#include <immintrin.h>

#include <cstdlib>
#include <string_view>

#include "engine/cpu/matmul_isa.h"
#include "engine/cpu/matmul_tiles.h"
#include "base/error.h"

namespace specula::cpu {

const char* isa_name(MatmulIsa isa) { return isa == MatmulIsa::avx512 ? "avx512" : "avx2"; }

std::vector<MatmulIsa> supported_matmul_isas() {
  std::vector<MatmulIsa> isas{MatmulIsa::avx2};
  if (__builtin_cpu_supports("avx512f")) isas.push_back(MatmulIsa::avx512);
  return isas;
}

MatmulIsa matmul_isa() {
  static const MatmulIsa chosen = [] {
    const std::vector<MatmulIsa> isas = supported_matmul_isas();
    const char* forced = std::getenv("SPECULA_MATMUL_ISA");
    if (forced == nullptr || *forced == '\0') return isas.back();
    for (MatmulIsa isa : isas)
      if (std::string_view(forced) == isa_name(isa)) return isa;
    throw SpeculaError(detail::concat("SPECULA_MATMUL_ISA='", forced,
                                      "' is not an instruction set this CPU runs (avx2",
                                      isas.size() > 1 ? " or avx512" : "", ")"));
  }();
  return chosen;
}

void matmul(const float* x, const PackedWeights& w, float* y, int n) {
  if (w.isa() == MatmulIsa::avx512) return matmul_avx512(x, w, y, n);
  return matmul_avx2(x, w, y, n);
}

namespace {
template <DType T>
void row_typed(const TensorView& w, int64_t row, float* out) {
  const int64_t cols = w.shape[1];
  const auto* p = static_cast<const unsigned char*>(w.data) + row * cols * kWeightBytes<T>;
  for (int64_t c = 0; c < cols; ++c) out[c] = scalar_weight<T>(p + c * kWeightBytes<T>);
}
}  // namespace

void weight_row(const TensorView& w, int64_t row, float* out) {
  switch (w.dtype) {
    case DType::F32: return row_typed<DType::F32>(w, row, out);
    case DType::F16: return row_typed<DType::F16>(w, row, out);
    case DType::BF16: return row_typed<DType::BF16>(w, row, out);
  }
}

std::vector<float> tensor_f32(const TensorView& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  weight_row(TensorView{t.name, t.dtype, {1, t.numel()}, t.data, t.origin}, 0, out.data());
  return out;
}

void matmul_reference(const float* x, const TensorView& w, float* y, int n) {
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<float> wrow(static_cast<std::size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    weight_row(w, o, wrow.data());
    for (int r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += double(x[r * in + k]) * wrow[k];
      y[r * out + o] = static_cast<float>(s);
    }
  }
}

}  // namespace specula::cpu
