// The runner's tensors: inputs made from the method's declared metadata (random or raw files),
// and the shape and checksums it prints for outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/executor/method_meta.h>

namespace et_cpu_runner {

// One method input: its bytes (owned here, the tensor points into them) and the tensor.
struct Input {
  std::vector<uint8_t> bytes;
  executorch::extension::TensorPtr tensor;
  std::string source;  // "random (seed N)" or the file
};

// "float32", "int64", "bool", ...: torch's names, so reports compare with Python's.
std::string dtype_name(executorch::aten::ScalarType type);

// "float32[1, 3, 32, 32]".
std::string describe(executorch::aten::ScalarType type, const std::vector<int32_t>& sizes);

// Makes input `index` of `meta` from `file` (raw bytes) or, when `file` is empty, from seeded
// random values. False with a one-line `error` when the input is not a tensor, the file is
// missing or its size is not the input's, or the dtype cannot be sampled.
bool make_input(
    const executorch::runtime::MethodMeta& meta,
    size_t index,
    const std::string& file,
    uint64_t seed,
    Input& input,
    std::string& error);

struct Checksum {
  double sum = 0;      // of the elements (bool: the number of true ones)
  double abs_sum = 0;  // of their absolute values
};

// False (and `error`) for a dtype the runner does not read.
bool checksum(const executorch::aten::Tensor& tensor, Checksum& out, std::string& error);

}  // namespace et_cpu_runner
