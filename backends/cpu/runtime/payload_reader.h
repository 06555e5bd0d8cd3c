// Reads a CPU-delegate payload (a flatbuffer of backends/cpu/serialization/schema.fbs) into a
// validated, plain C++ description of the graph. Nothing past this point touches the untrusted
// bytes: the flatbuffers verifier bounds every offset, then our own checks make the graph
// well-formed (indices in range, dtypes and shapes valid, each value written once before it is
// read, every argument matching its kernel's schema). Any failure is an error naming the place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

namespace et_cpu_plugin {
namespace cpu {

// The payload format versions this reader understands (Graph.version): 2 adds the int8 ops
// (et_cpu_quant::*, see quantized_op_check.h); version 1 payloads read as before.
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kMinFormatVersion = 1;
constexpr uint32_t kQuantizedOpsVersion = 2;
// Tensors of higher rank are rejected (kernel keys and TensorImpl dim orders are sized for 16).
constexpr size_t kMaxRank = 16;
// Largest tensor / arena the runtime accepts; a hostile shape must not become a huge allocation.
#ifndef ET_CPU_MAX_TENSOR_BYTES
#define ET_CPU_MAX_TENSOR_BYTES (size_t{1} << 34)
#endif
constexpr size_t kMaxTensorBytes = ET_CPU_MAX_TENSOR_BYTES;

enum class ValueKind : int8_t { Intermediate = 0, Input = 1, Output = 2, Constant = 3 };

struct ValueSpec {
  executorch::aten::ScalarType dtype;
  std::vector<int64_t> shape;
  ValueKind kind;
  std::string constant_key;
  std::string name;
  size_t nbytes = 0;
  int64_t producer = -1;  // index of the op writing it (Intermediate/Output), else -1
  int64_t last_use = -1;  // index of the last op referencing it, else -1
};

// One kernel argument, already in the form the kernel's schema expects.
struct ArgValue {
  enum class Type {
    Tensor,
    TensorList,
    OptionalTensorList,  // entries of -1 are None
    Int,
    Double,
    Bool,
    IntList,
    DoubleList,
    BoolList,
    None,
    String
  };
  Type type = Type::None;
  int32_t tensor = -1;
  std::vector<int32_t> tensors;
  int64_t int_value = 0;  // Int (also ScalarType numbers and MemoryFormat/Layout enums)
  double double_value = 0;
  bool bool_value = false;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<bool> bools;
  std::string string_value;
};

struct OpSpec {
  std::string name;
  std::string route;
  std::string kernel;
  uint8_t provider = 0;
  uint32_t flags = 0;
  std::vector<ArgValue> args;
};

struct GraphSpec {
  std::vector<ValueSpec> values;
  std::vector<int32_t> inputs;
  std::vector<int32_t> outputs;
  std::vector<OpSpec> ops;
};

// Element size of the dtypes the format allows, 0 for any other.
size_t element_size(executorch::aten::ScalarType dtype);

// Reads and validates `size` bytes at `data` into *out. Does not consult the operator registry.
executorch::runtime::Error read_payload(const void* data, size_t size, GraphSpec* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
