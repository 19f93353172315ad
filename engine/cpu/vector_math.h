// defines: exp_clamped, e^x per lane over the vector traits V (vector_avx2.h, vector_avx512.h),
// shared by the attention softmax and the SiLU gate.
#pragma once

namespace specula::cpu {
namespace {

// e^x per lane, x clamped to [-87, 88] (e^-87 ~ 1.6e-38 and e^88 ~ 1.7e38, the f32 range):
// x = n ln2 + r with |r| <= ln2 / 2, e^r from Cephes' expf polynomial, 2^n put into the
// exponent bits. Within 2 ulp of the true value inside the clamp.
template <class V>
typename V::Reg exp_clamped(typename V::Reg x) {
  using Reg = typename V::Reg;
  x = V::max(V::min(x, V::set1(88.0f)), V::set1(-87.0f));
  const Reg n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  // r = x - n ln2, with ln2 split in a part exact in f32 and the rest.
  Reg r = V::fma(n, V::set1(-0.693359375f), x);
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  Reg p = V::set1(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = V::fma(p, r, V::set1(c));
  const Reg er = V::add(V::fma(p, V::mul(r, r), r), V::set1(1.0f));
  return V::mul(er, V::pow2(n));
}

}  // namespace
}  // namespace specula::cpu
