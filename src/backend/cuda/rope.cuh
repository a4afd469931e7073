// RoPE on the device, shared by the RoPE kernels (elementwise.cu) and the decode attention kernel
// that applies RoPE to its own query and key rows (attention.cu): angles in double, exactly as the
// CPU reference (backend/cpu/kernels_ref.cpp) computes them.
// Thread-safety: pure device functions.
#pragma once

#include <cstdint>

namespace strata::cuda {

// RoPE angles: theta_i = pos * freq_scale * inv_freq[i] / freq_factors[i] in double, with
// inv_freq[i] = freq_base^(-2i/n_rot) computed on the host by std::pow as the CPU reference does
// (rope_inv_freq), so angles agree with it to the last bit of the double product.
struct RopeArgs {
  const double* inv_freq;
  const float* freq_factors;
  double freq_scale;
  int32_t n_rot;
  bool neox;
};

// Pairs (i, i + n_rot/2 or 2i, 2i + 1) a kernel rotates at most (n_rot <= 512).
constexpr int kMaxRotPairs = 256;

__device__ __forceinline__ void rope_angle(const RopeArgs& a, int32_t pos, int32_t i, double* c, double* s) {
  double theta = static_cast<double>(pos) * a.freq_scale * a.inv_freq[i];
  if (a.freq_factors != nullptr) theta /= a.freq_factors[i];
  sincos(theta, s, c);
}

__device__ __forceinline__ void rope_rotate(float* row, int32_t i, int32_t half, bool neox, double c, double s) {
  const int32_t a = neox ? i : 2 * i;
  const int32_t b = neox ? i + half : 2 * i + 1;
  const double x0 = row[a], x1 = row[b];
  row[a] = static_cast<float>(x0 * c - x1 * s);
  row[b] = static_cast<float>(x0 * s + x1 * c);
}

}  // namespace strata::cuda
