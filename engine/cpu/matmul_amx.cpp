// defines: matmul_bf16amx_tiles, the bf16amx product's kernel (matmul_bf16amx.h) with AMX tiles
// (this unit alone is compiled with -mamx-tile -mamx-bf16; matmul_bf16amx.cpp calls it only
// where bf16amx_unsupported() is empty).
//
// Tiles: per block of 64 outputs and per 16 rows of x, four accumulator tiles C0..C3 (16 rows x
// 16 outputs each, f32) stay in tile registers over all of k; per tile step of 16 k pairs, one
// A tile (the rows' 16 pairs, 64 bytes a row) and, for each C_j, one B tile: the block's 16
// steps of outputs 16 j .. 16 j + 15, which PackedWeights already lays out as TDPBF16PS's
// operand (64 bytes of pairs per step, steps 256 bytes apart: tileloadd's stride). A row
// count that is not a multiple of 16 runs its last rows in tiles of fewer rows (the tile
// configuration's row counts); every element still sees the same instructions over its k.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "base/region_check.h"
#include "engine/cpu/matmul_bf16amx.h"
#include "engine/cpu/matmul_tiles.h"

namespace specula::cpu {
namespace {

constexpr int kTileRows = 16;                                    // rows of x per accumulator tile
constexpr int64_t kBlockOutputs = 64;                            // outputs per packed avx512 block
constexpr int64_t kStepBytes = kBlockOutputs * 4;                // one BF16 pair per output
constexpr int64_t kTileBytes = kAmxPairsPerTile * 4;             // one row of an A or B tile
constexpr double kFlopsPerNs = 400;                              // one core, 16+ rows, below the tiles' rate

// The tile configuration LDTILECFG reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: accumulators (m rows x 16 f32); 4: A (m rows x 16 pairs); 5, 6: B (16 steps x 16 pairs).
void configure(int m) {
  TileConfig c;
  for (int t = 0; t < 5; ++t) {
    c.rows[t] = static_cast<uint8_t>(m);
    c.colsb[t] = kTileBytes;
  }
  for (int t = 5; t < 7; ++t) {
    c.rows[t] = kAmxPairsPerTile;
    c.colsb[t] = kTileBytes;
  }
  _tile_loadconfig(&c);
}

// Rows [r0, r0 + m) of one block: C_j = Σ over the tile steps, from zero. `stream`: these
// rows are the first to read the block, so each tile step also requests from memory the lines
// kPrefetchBytes ahead (the hardware prefetcher alone falls behind, as for the float tiles);
// the later rows find the block in L2.
//   x: in [n, stride] pairs; block: the block's packed steps; c: out [m rows, c_stride] f32
void block_rows(const uint32_t* x, int64_t stride, int m, const unsigned char* block, int64_t steps, float* c,
                int64_t c_stride, bool stream) {
  for (int r = 0; r < m; ++r) check_region(x + r * stride, static_cast<std::size_t>(steps) * 4);
  check_region(block, static_cast<std::size_t>(steps * kStepBytes));
  for (int r = 0; r < m; ++r) check_region(c + r * c_stride, kBlockOutputs * sizeof(float));
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; s += kAmxPairsPerTile) {
    const unsigned char* p = block + s * kStepBytes;
    if (stream)
      for (int64_t line = 0; line < kAmxPairsPerTile * kStepBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + line), _MM_HINT_T0);
    _tile_loadd(4, x + s, stride * 4);
    _tile_loadd(5, p, kStepBytes);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, p + kTileBytes, kStepBytes);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(5, p + 2 * kTileBytes, kStepBytes);
    _tile_dpbf16ps(2, 4, 5);
    _tile_loadd(6, p + 3 * kTileBytes, kStepBytes);
    _tile_dpbf16ps(3, 4, 6);
  }
  const int64_t row_bytes = c_stride * static_cast<int64_t>(sizeof(float));
  _tile_stored(0, c, row_bytes);
  _tile_stored(1, c + 16, row_bytes);
  _tile_stored(2, c + 32, row_bytes);
  _tile_stored(3, c + 48, row_bytes);
}

// Blocks [b0, b1) on this thread: its own tile configuration, released at the end.
void blocks(const uint32_t* x, const PackedWeights& w, float* y, int n, int64_t b0, int64_t b1) {
  const int64_t out = w.out(), steps = w.steps(), stride = steps;
  float last[kTileRows * kBlockOutputs];  // a partial block's rows, before the valid outputs are copied
  int configured = 0;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t o0 = b * kBlockOutputs, valid = std::min(kBlockOutputs, out - o0);
    for (int r0 = 0; r0 < n; r0 += kTileRows) {
      const int m = std::min(kTileRows, n - r0);
      if (m != configured) configure(configured = m);
      const uint32_t* rows = x + r0 * stride;
      if (valid == kBlockOutputs) {
        block_rows(rows, stride, m, w.block_data(b), steps, y + r0 * out + o0, out, r0 == 0);
      } else {
        block_rows(rows, stride, m, w.block_data(b), steps, last, kBlockOutputs, r0 == 0);
        for (int r = 0; r < m; ++r) {
          check_region(y + (r0 + r) * out + o0, static_cast<std::size_t>(valid) * sizeof(float));
          std::memcpy(y + (r0 + r) * out + o0, last + r * kBlockOutputs, static_cast<std::size_t>(valid) * sizeof(float));
        }
      }
    }
  }
  if (configured != 0) _tile_release();
}

}  // namespace

void matmul_bf16amx_tiles(const uint32_t* x, const PackedWeights& w, float* y, int n) {
  SPECULA_CHECK(w.block() == kBlockOutputs && w.pair() == 2 && w.steps() % kAmxPairsPerTile == 0,
                "matmul_bf16amx_tiles: weights packed for another layout");
  const int64_t count = w.blocks();
  if (worth_threads(one_thread_ns(w, n, kFlopsPerNs))) {
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      blocks(x, w, y, n, count * t / threads, count * (t + 1) / threads);
    }
  } else {
    blocks(x, w, y, n, 0, count);
  }
}

}  // namespace specula::cpu
