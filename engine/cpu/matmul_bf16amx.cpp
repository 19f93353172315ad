#include "engine/cpu/matmul_bf16amx.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16dot.h"

namespace specula::cpu {
namespace {

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state component
constexpr long kXfeatureXtiledata = 18;     // the tile data state (XCR0 bit 18)

std::string check_support() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return "this CPU reports no AMX (no CPUID leaf 7)";
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx512f = ebx & (1u << 16), amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
  if (!amx_tile || !amx_bf16 || !avx512f)
    return "this CPU has no AMX-BF16 (it needs AMX-TILE, AMX-BF16 and AVX-512F: Intel Xeon Sapphire Rapids or later)";
  __cpuid(1, eax, ebx, ecx, edx);
  if (!(ecx & (1u << 27))) return "the OS does not enable XSAVE, so no AMX tile state";
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & (3u << 17)) != (3u << 17)) return "the OS does not enable the AMX tile state (XCR0 bits 17-18)";
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return "the kernel refused this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM; Linux >= 5.16)";
  return "";
}

}  // namespace

const std::string& bf16amx_unsupported() {
  static const std::string reason = check_support();
  return reason;
}

double bf16amx_error_bound(double abs_sum, int64_t in) {
  constexpr int64_t kTileK = 2 * kAmxPairsPerTile;
  return bf16_products_error_bound(abs_sum, (in + kTileK - 1) / kTileK * kTileK);
}

void matmul_bf16amx(const float* x, const PackedWeights& w, float* y, int n) {
  SPECULA_CHECK(w.dtype() == DType::BF16 && w.isa() == MatmulIsa::avx512 && w.steps() % kAmxPairsPerTile == 0,
                "matmul_bf16amx: weights packed as ", dtype_name(w.dtype()), " for ", isa_name(w.isa()), " in ",
                w.steps(), " steps; bf16amx needs BF16 for avx512 in a multiple of ", kAmxPairsPerTile);
  SPECULA_CHECK(bf16amx_unsupported().empty(), "matmul_bf16amx: ", bf16amx_unsupported());
  thread_local std::vector<uint32_t> rows, padded;  // the caller's thread; the workers only read them
  bf16dot_round_rows_avx512(x, n, w.in(), rows);
  const int64_t pairs = (w.in() + 1) / 2, stride = w.steps();
  if (stride == pairs) return matmul_bf16amx_tiles(rows.data(), w, y, n);
  padded.assign(static_cast<std::size_t>(n * stride), 0u);
  for (int64_t r = 0; r < n; ++r) std::copy_n(rows.data() + r * pairs, pairs, padded.data() + r * stride);
  matmul_bf16amx_tiles(padded.data(), w, y, n);
}

}  // namespace specula::cpu
