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
// (et_cpu_quant::*, see quantized_op_check.h), 3 symbolic dimensions with bounds (Graph.symbols,
// Value.dim_*, SymExpr sizes of int arguments); older payloads read as before.
// 4 delegate state (ValueKind::State, Value.state_update).
constexpr uint32_t kFormatVersion = 4;
constexpr uint32_t kMinFormatVersion = 1;
constexpr uint32_t kQuantizedOpsVersion = 2;
constexpr uint32_t kDynamicShapesVersion = 3;
constexpr uint32_t kStateVersion = 4;
// Largest upper bound of a symbol (and of a symbolic dimension); sizes are 32-bit in ExecuTorch.
constexpr int64_t kMaxSymbolBound = INT32_MAX;
// Terms of one size expression at most (a size rarely mixes more than two symbols).
constexpr size_t kMaxExprTerms = 8;
// Tensors of higher rank are rejected (kernel keys and TensorImpl dim orders are sized for 16).
constexpr size_t kMaxRank = 16;
// Largest tensor / arena the runtime accepts; a hostile shape must not become a huge allocation.
#ifndef ET_CPU_MAX_TENSOR_BYTES
#define ET_CPU_MAX_TENSOR_BYTES (size_t{1} << 34)
#endif
constexpr size_t kMaxTensorBytes = ET_CPU_MAX_TENSOR_BYTES;

// A size: offset + sum(coeffs[i] * symbol[symbols[i]]), coefficients >= 0 (so its largest value
// is at the symbols' upper bounds). No symbols: the constant `offset`.
struct SymExprSpec {
  int64_t offset = 0;
  std::vector<int32_t> symbols;
  std::vector<int64_t> coeffs;
  bool is_static() const { return symbols.empty(); }
};

// A symbolic dimension of the program (torch.export.Dim) with its bounds, min <= max.
struct SymbolSpec {
  std::string name;
  int64_t min = 0;
  int64_t max = 0;
};

// State (version 4): a mutated buffer the delegate owns; initial bytes under constant_key, one
// copy per loaded delegate, persisting across calls, overwritten by `state_update` after each.
enum class ValueKind : int8_t { Intermediate = 0, Input = 1, Output = 2, Constant = 3, State = 4 };

// specialize() (dynamic_shapes.cc) copies a dynamic value field by field: a new field goes there
// too.
struct ValueSpec {
  executorch::aten::ScalarType dtype;
  std::vector<int64_t> shape;
  ValueKind kind;
  std::string constant_key;
  std::string name;
  size_t nbytes = 0;  // of `shape`: the upper bound for a tensor with symbolic dimensions
  // Empty for a static tensor, else one entry per dimension (see schema.fbs Value.dim_*).
  std::vector<int64_t> dim_min;
  std::vector<int64_t> dim_max;
  std::vector<SymExprSpec> dim_exprs;
  bool is_dynamic() const { return !dim_exprs.empty(); }
  // State only: the value written back into it after each call (an op result of the same dtype
  // and static shape, the update of no other state); -1 for any other kind.
  int32_t state_update = -1;
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
  // A symbolic Int (int_expr) or IntList entries (int_exprs, empty or one per entry); the ints
  // hold their values at the upper bounds.
  SymExprSpec int_expr;
  std::vector<SymExprSpec> int_exprs;
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
  std::vector<SymbolSpec> symbols;  // empty: every shape is static
  bool is_dynamic() const { return !symbols.empty(); }
};

// `expr` at the given symbol values (the payload reader bounded every term: no overflow).
int64_t evaluate_size(const SymExprSpec& expr, const std::vector<int64_t>& symbols);

// Element size of the dtypes the format allows, 0 for any other.
size_t element_size(executorch::aten::ScalarType dtype);

// Reads and validates `size` bytes at `data` into *out. Does not consult the operator registry.
executorch::runtime::Error read_payload(const void* data, size_t size, GraphSpec* out);

}  // namespace cpu
}  // namespace et_cpu_plugin
