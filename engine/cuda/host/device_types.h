// defines: the device-side vocabulary of CUDA C++ for the host execution (runtime.h): the
// function and variable qualifiers, the vector types (dim3, uint3, uint4, float2, float4),
// the 16-bit floats __half and __nv_bfloat16 (bits only; arithmetic goes through f32, as the
// kernels do) with the conversions the kernels call, and the math built-ins they use (the
// double intrinsics __dadd_rn, __dsub_rn, __dmul_rn, __ddiv_rn and their float counterparts
// __fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn among them).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// Static shared memory: one object for every thread of the running block (the block's threads
// are fibers, blocks run one after another, one grid at a time: executor.h).
#define __shared__ static

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

struct __half {
  std::uint16_t bits;
};
struct __nv_bfloat16 {
  std::uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline float __uint_as_float(unsigned int u) { return std::bit_cast<float>(u); }
inline unsigned int __float_as_uint(float f) { return std::bit_cast<unsigned int>(f); }

inline float __bfloat162float(__nv_bfloat16 v) { return __uint_as_float(static_cast<unsigned int>(v.bits) << 16); }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }
// Round to nearest even; NaN stays a (quiet) NaN.
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const unsigned int u = __float_as_uint(f);
  if (std::isnan(f)) return {static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  const unsigned int rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<std::uint16_t>(rounded >> 16)};
}

// IEEE binary16 to f32, exact (subnormals and infinities included).
inline float __half2float(__half v) {
  const unsigned int sign = (v.bits & 0x8000u) << 16, exponent = (v.bits >> 10) & 0x1fu, mantissa = v.bits & 0x3ffu;
  if (exponent == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// One IEEE double operation each, rounded to nearest (host code is compiled without
// contraction, -ffp-contract=off).
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
