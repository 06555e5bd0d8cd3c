// Our own loops for reductions over one run of adjacent dims of a contiguous tensor: amax / amin
// (text CNN's max over time), argmax / argmin (a classifier's predicted class), any (the
// attention guard's "is any score in this row unmasked"), row means (RMSNorm's mean).
// ExecuTorch's portable kernels compute an index per element; here the tensor is read as
// [outer, extent, inner] in one pass.
// No ExecuTorch or oneDNN types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace et_cpu_plugin {
namespace onednn {

// A contiguous tensor seen as [outer, extent, inner], the reduction over `extent`.
struct ReductionShape {
  int64_t outer = 1;
  int64_t extent = 1;
  int64_t inner = 1;

  // The shape reducing `dims` (each in [-rank, rank), all distinct, adjacent once sorted; empty:
  // every dim) of a tensor of `sizes`. Empty `error` on success; else what is wrong.
  static ReductionShape over(const std::vector<int64_t>& sizes, std::vector<int64_t> dims,
                             std::string* error);
  int64_t outputs() const { return outer * inner; }
};

// out[o, i] = max (or min) over k of x[o, k, i]; NaN when any of them is NaN (as torch).
void reduce_max(const ReductionShape& shape, bool minimum, const float* x, float* out);

// out[o, i] = the first k where x[o, k, i] is the max (min); the first NaN's k if any (torch).
void reduce_argmax(const ReductionShape& shape, bool minimum, const float* x, int64_t* out);

// out[o, i] = any over k of x[o, k, i].
void reduce_any(const ReductionShape& shape, const bool* x, bool* out);

// out[r] = the mean of x's r-th contiguous row of `length` (NaN when `length` is 0), eight
// partial sums per row (independent chains): a plain-layout global average (RMSNorm's mean).
void row_means(int64_t rows, int64_t length, const float* x, float* out);

}  // namespace onednn
}  // namespace et_cpu_plugin
