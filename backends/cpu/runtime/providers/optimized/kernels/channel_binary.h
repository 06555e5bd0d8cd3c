// Our own AVX-512 kernel for a binary op between an activation and one value per channel: the
// squeeze-excite gate multiply (x * gate, gate [N, C, 1, 1]) and per-channel shifts and scales.
// oneDNN 3.2 runs them on jit:uni binary's per-channel broadcast, which cost 8-45 us per gate in
// MobileNetV3 in the delegate against XNNPACK's 1-8 us (see the provider README); this is one
// pass of loads, one vector op and stores, split into bands of rows on the pool.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"

namespace et_cpu_plugin {
namespace onednn {

// Whether ChannelBinary runs on this CPU (AVX-512F) and is not switched off
// (ET_CPU_CHANNEL_BINARY=0 keeps oneDNN's binary, for measuring; read at each call).
bool channel_binary_enabled();

// out = a op v (or v op a when `vector_first`), a and out {images, channels, pixels} in one
// layout, v [images, channels] (one image's vector for every image when `shared_vector`).
struct ChannelBinary {
  BinaryOp op = BinaryOp::kMul;
  bool vector_first = false;
  bool channels_last = true;  // a and out: pixels x channels per image; else channels x pixels
  bool shared_vector = false;
  int64_t images = 1;
  int64_t channels = 1;
  int64_t pixels = 1;

  // Rows: pixels of every image (channels-last) or channels of every image (plain); run() takes
  // a range of them, so the pool can share them out.
  int64_t rows() const { return images * (channels_last ? pixels : channels); }
  void run(const float* a, const float* v, float* out, int64_t first_row, int64_t last_row) const;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
