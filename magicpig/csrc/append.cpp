// Kernel 7: a decode step's new key / value rows appended to a decoder's exact buffers (the static part of
// an offloaded layer, or a dense layer's cache), centred and converted to the buffer's type in one call.
// A step appends one row per (sequence, kv-head), a few hundred floats: the work runs on the calling
// thread, and the point is to replace the half dozen tensor operations (centre, convert, two narrowed
// copies) that cost tens of microseconds each on a decode step's cold caches.
#include <cstring>

#include "magicpig_cpu.h"

namespace magicpig {

static inline uint16_t f32_to_bf16(float x) {  // round to nearest even, as torch's conversion; NaN stays NaN
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

static inline float bf16_to_f32(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void append_rows(const AppendArgs& a) {
  const int64_t d = a.d;
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.Hkv; ++h)
      for (int64_t j = 0; j < a.m; ++j) {
        const int64_t at = b * a.x_stride[0] + h * a.x_stride[1] + j * a.x_stride[2];
        const char* src = static_cast<const char*>(a.x) + at * (a.x_bf16 ? 2 : 4);
        const int64_t row = (b * a.Hkv + h) * a.cap + a.n + j;
        const float* c = a.center ? a.center + (b * a.Hkv + h) * d : nullptr;
        for (int64_t i = 0; i < d; ++i) {
          float v = a.x_bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(src)[i])
                             : reinterpret_cast<const float*>(src)[i];
          if (c) v -= c[i];
          if (a.buf_bf16) {
            static_cast<uint16_t*>(a.buf)[row * d + i] = f32_to_bf16(v);
          } else {
            static_cast<float*>(a.buf)[row * d + i] = v;
          }
        }
      }
}

}  // namespace magicpig
