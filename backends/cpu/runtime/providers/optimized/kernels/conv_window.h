// The geometry our own 2D convolution kernels (depthwise_conv.h, stem_conv.h, stream_conv.h,
// winograd_conv.h) share: one image's input and output extents, the kernel, strides and top /
// left padding; and a dense convolution's shape (the window and its channels).
#pragma once

#include <cstdint>

namespace et_cpu_plugin {
namespace onednn {

// torch's semantics, dilation 1. Padding on the right and bottom is whatever out_w / out_h imply
// (anything past the input reads as zero).
struct ConvWindow {
  int64_t in_h = 0;
  int64_t in_w = 0;
  int64_t out_h = 0;
  int64_t out_w = 0;
  int64_t kernel_h = 0;
  int64_t kernel_w = 0;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_top = 0;
  int64_t pad_left = 0;
};

// One image's dense convolution (groups 1): its window from `in_channels` to `out_channels`
// (StreamConv's and WinogradConv's shape).
struct DenseConvShape : ConvWindow {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
