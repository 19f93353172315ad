#include "engine/cpu/weight_matrix.h"

namespace specula::cpu {
namespace {

std::variant<PackedWeights, PackedInt8> pack(const TensorView& w, MatmulIsa isa, std::optional<DType> as) {
  if (as == DType::I8) return std::variant<PackedWeights, PackedInt8>(std::in_place_type<PackedInt8>, w);
  return std::variant<PackedWeights, PackedInt8>(std::in_place_type<PackedWeights>, w, isa, as);
}

}  // namespace

WeightMatrix::WeightMatrix(const TensorView& w, MatmulIsa isa, std::optional<DType> as)
    : packed_(pack(w, isa, as)), kernel_(int8_kernel(isa)) {}

DType WeightMatrix::dtype() const {
  if (const auto* f = std::get_if<PackedWeights>(&packed_)) return f->dtype();
  return DType::I8;
}

std::size_t WeightMatrix::bytes() const {
  if (const auto* f = std::get_if<PackedWeights>(&packed_))
    return static_cast<std::size_t>(f->out() * f->in()) * dtype_size(f->dtype());
  return std::get<PackedInt8>(packed_).bytes();
}

void WeightMatrix::product(const float* x, float* y, int n) const {
  if (const auto* f = std::get_if<PackedWeights>(&packed_)) return matmul(x, *f, y, n);
  matmul_int8(x, std::get<PackedInt8>(packed_), y, n, kernel_);
}

}  // namespace specula::cpu
