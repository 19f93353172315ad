// defines: the ISA-generic tiles of the int8 product (matmul_int8.h), written once over a
// traits type V and compiled by one unit per kernel (matmul_int8_avx2.cpp,
// matmul_int8_vnni.cpp), in an unnamed namespace so each unit keeps its own copy.
//
// V provides: kLanes int32/f32 lanes per register (a 16-output group is kRegs = 16 / kLanes
// registers), IReg / FReg, Weight (a quad line's slice as the dot wants it: load_weight(p)),
// start(bias) (the block's accumulator start: VNNI the -128 sum(qx) offset, AVX2 zero),
// broadcast(x4) (4 s8 activations in every lane), dot(acc, weight, x) (+= the 4-term dot
// per lane, exact), scales(p) (kLanes f16 scales as f32), and the f32 ops to_float, set1,
// mul, fma, zero, storeu.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/region_check.h"
#include "engine/cpu/matmul_int8.h"
#include "engine/cpu/threads.h"

namespace specula::cpu {
namespace {

// R rows x G groups (16 G outputs) from group g0; every (r, o) lane follows the arithmetic of
// matmul_int8.h, whatever R and G.
//   x: the quantised rows, tile rows from r0; y: out [n, out]
template <class V, int R, int G>
inline void int8_tile(const QuantizedRows& x, int r0, const PackedInt8& w, int64_t g0, float* y) {
  constexpr int kRegs = int(PackedInt8::kOutputs) / V::kLanes;
  constexpr int64_t kBlock = PackedInt8::kBlock, kQuad = PackedInt8::kQuadBytes;
  // Each group is one sequential stream; lines this far on are requested while a block computes.
  constexpr int64_t kPrefetchBytes = 4096;
  const int64_t nb = w.blocks(), padded = nb * kBlock, out = w.out();
  for (int r = 0; r < R; ++r) {
    check_region(x.q.data() + (r0 + r) * padded, static_cast<std::size_t>(padded));
    check_region(x.bias.data() + (r0 + r) * nb, static_cast<std::size_t>(nb) * sizeof(int32_t));
    check_region(x.scale.data() + (r0 + r) * nb, static_cast<std::size_t>(nb) * sizeof(float));
  }
  for (int g = 0; g < G; ++g) {
    check_region(w.group(g0 + g), static_cast<std::size_t>(nb * PackedInt8::kBlockQuadBytes));
    check_region(w.scales(g0 + g), static_cast<std::size_t>(nb * PackedInt8::kOutputs) * sizeof(uint16_t));
    const int64_t o0 = (g0 + g) * PackedInt8::kOutputs;
    for (int r = 0; r < R; ++r)
      check_region(y + (r0 + r) * out + o0, static_cast<std::size_t>(std::min(PackedInt8::kOutputs, out - o0)) * sizeof(float));
  }
  typename V::FReg acc[R][G][kRegs];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g)
      for (int v = 0; v < kRegs; ++v) acc[r][g][v] = V::zero();
  for (int64_t b = 0; b < nb; ++b) {
    typename V::IReg iacc[R][G][kRegs];
    for (int r = 0; r < R; ++r) {
      const typename V::IReg start = V::start(x.bias[(r0 + r) * nb + b]);
      for (int g = 0; g < G; ++g)
        for (int v = 0; v < kRegs; ++v) iacc[r][g][v] = start;
    }
    for (int j = 0; j < int(kBlock / 4); ++j) {
      typename V::Weight wv[G][kRegs];
      for (int g = 0; g < G; ++g) {
        const unsigned char* line = w.group(g0 + g) + b * PackedInt8::kBlockQuadBytes + j * kQuad;
        _mm_prefetch(reinterpret_cast<const char*>(line + kPrefetchBytes), _MM_HINT_T0);
        for (int v = 0; v < kRegs; ++v) wv[g][v] = V::load_weight(line + v * V::kLanes * 4);
      }
      for (int r = 0; r < R; ++r) {
        int32_t x4;
        std::memcpy(&x4, x.q.data() + (r0 + r) * padded + b * kBlock + j * 4, 4);
        const typename V::IReg xb = V::broadcast(x4);
        for (int g = 0; g < G; ++g)
          for (int v = 0; v < kRegs; ++v) iacc[r][g][v] = V::dot(iacc[r][g][v], wv[g][v], xb);
      }
    }
    typename V::FReg hw[G][kRegs];
    for (int g = 0; g < G; ++g)
      for (int v = 0; v < kRegs; ++v) hw[g][v] = V::scales(w.scales(g0 + g) + b * PackedInt8::kOutputs + v * V::kLanes);
    for (int r = 0; r < R; ++r) {
      const typename V::FReg dx = V::set1(x.scale[(r0 + r) * nb + b]);
      for (int g = 0; g < G; ++g)
        for (int v = 0; v < kRegs; ++v)
          acc[r][g][v] = V::fma(V::to_float(iacc[r][g][v]), V::mul(hw[g][v], dx), acc[r][g][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) {
      const int64_t o0 = (g0 + g) * PackedInt8::kOutputs;
      float* yr = y + (r0 + r) * out + o0;
      if (o0 + PackedInt8::kOutputs <= out) {
        for (int v = 0; v < kRegs; ++v) V::storeu(yr + v * V::kLanes, acc[r][g][v]);
      } else {  // the last group's padding outputs are computed, never stored
        float full[PackedInt8::kOutputs];
        for (int v = 0; v < kRegs; ++v) V::storeu(full + v * V::kLanes, acc[r][g][v]);
        std::copy_n(full, out - o0, yr);
      }
    }
}

// All n rows against groups [g0, g0 + G): tiles of V::kRows rows, then one of the rows left.
template <class V, int G>
void int8_rows(const QuantizedRows& x, int n, const PackedInt8& w, int64_t g0, float* y) {
  constexpr int kRows = V::kRows;
  int r = 0;
  for (; r + kRows <= n; r += kRows) int8_tile<V, kRows, G>(x, r, w, g0, y);
  [&]<int... Rs>(std::integer_sequence<int, Rs...>) {
    ((n - r == Rs + 1 ? int8_tile<V, Rs + 1, G>(x, r, w, g0, y) : void()), ...);
  }(std::make_integer_sequence<int, kRows - 1>{});
}

// The product over columns of G groups (V::kDecodeGroups for one row, which has no other
// weight reuse, V::kGroups for several), split across OpenMP threads when worth it.
template <class V, int G>
void int8_columns(const QuantizedRows& x, const PackedInt8& w, float* y, int n) {
  const int64_t groups = w.groups(), columns = (groups + G - 1) / G;
  const auto column = [&](int64_t c) {
    const int64_t g0 = c * G;
    if (g0 + G <= groups) return int8_rows<V, G>(x, n, w, g0, y);
    for (int64_t g = g0; g < groups; ++g) int8_rows<V, 1>(x, n, w, g, y);
  };
  // The one-thread time (worth_threads): the bytes at ~40 GB/s or the int8 MACs at ~200 per ns.
  const double ns = std::max(double(w.bytes()) / 40, double(n) * double(w.out()) * double(w.in()) / 200);
  if (worth_threads(ns)) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < columns; ++c) column(c);
  } else {
    for (int64_t c = 0; c < columns; ++c) column(c);
  }
}

template <class V>
void int8_product(const QuantizedRows& x, const PackedInt8& w, float* y, int n) {
  if (n == 1) return int8_columns<V, V::kDecodeGroups>(x, w, y, n);
  return int8_columns<V, V::kGroups>(x, w, y, n);
}

}  // namespace
}  // namespace specula::cpu
