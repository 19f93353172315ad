#include "engine/cpu/weight_matrix.h"

namespace specula::cpu {
namespace {

std::variant<PackedWeights, PackedInt8> pack(const TensorView& w, MatmulIsa isa, std::optional<MatrixFormat> as) {
  if (as == MatrixFormat::kInt8) return std::variant<PackedWeights, PackedInt8>(std::in_place_type<PackedInt8>, w);
  if (as == MatrixFormat::kBF16Dot)
    return std::variant<PackedWeights, PackedInt8>(std::in_place_type<PackedWeights>, w, isa, DType::BF16, true);
  if (as == MatrixFormat::kBF16Amx)  // the tiles' layout is avx512's, whatever the process's ISA
    return std::variant<PackedWeights, PackedInt8>(std::in_place_type<PackedWeights>, w, MatmulIsa::avx512, DType::BF16,
                                                   true, kAmxPairsPerTile);
  return std::variant<PackedWeights, PackedInt8>(std::in_place_type<PackedWeights>, w, isa,
                                                 as ? element_dtype(*as) : std::nullopt);
}

}  // namespace

WeightMatrix::WeightMatrix(const TensorView& w, MatmulIsa isa, std::optional<MatrixFormat> as)
    : format_(as),
      packed_(pack(w, isa, as)),
      int8_kernel_(int8_kernel(isa)),
      bf16dot_kernel_(bf16dot_kernel(isa)) {}

std::size_t WeightMatrix::bytes() const {
  if (const auto* f = std::get_if<PackedWeights>(&packed_))
    return static_cast<std::size_t>(f->out() * f->in()) * dtype_size(f->dtype());
  return std::get<PackedInt8>(packed_).bytes();
}

void WeightMatrix::product(const float* x, float* y, int n) const {
  if (format_ == MatrixFormat::kInt8) return matmul_int8(x, std::get<PackedInt8>(packed_), y, n, int8_kernel_);
  if (format_ == MatrixFormat::kBF16Dot)
    return matmul_bf16dot(x, std::get<PackedWeights>(packed_), y, n, bf16dot_kernel_);
  if (format_ == MatrixFormat::kBF16Amx) return matmul_bf16amx(x, std::get<PackedWeights>(packed_), y, n);
  matmul(x, std::get<PackedWeights>(packed_), y, n);
}

}  // namespace specula::cpu
