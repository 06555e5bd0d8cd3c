#include "backends/cpu/runtime/payload_reader.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/kernel_signature.h"
#include "backends/cpu/runtime/quantized_op_check.h"
#include "backends/cpu/serialization/schema_generated.h"

namespace et_cpu_plugin {
namespace cpu {

using executorch::aten::ScalarType;
using executorch::runtime::Error;

size_t element_size(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Bool:
      return 1;
    case ScalarType::Short:
      return 2;
    case ScalarType::Int:
    case ScalarType::Float:
      return 4;
    case ScalarType::Long:
      return 8;
    default:
      return 0;
  }
}

namespace {

// Upper bounds that keep a hostile payload from turning into huge loops or allocations; far above
// what a real model lowers to.
constexpr size_t kMaxValues = size_t{1} << 20;
constexpr size_t kMaxOps = size_t{1} << 20;

// The verifier checks a vector's length field (4-byte alignment), not that 8-byte elements are
// 8-byte aligned: copy elements out bytewise instead of loading them in place.
template <typename T>
std::vector<T> copy_vector(const flatbuffers::Vector<T>* vector) {
  std::vector<T> out(vector == nullptr ? 0 : vector->size());
  if (!out.empty()) std::memcpy(out.data(), vector->Data(), out.size() * sizeof(T));
  return out;
}

const char* string_or(const flatbuffers::String* text, const char* fallback) {
  return text != nullptr ? text->c_str() : fallback;
}

class Reader {
 public:
  explicit Reader(GraphSpec* out) : graph_(*out) {}

  Error read(const fb::Graph& graph) {
    if (graph.version() < kMinFormatVersion || graph.version() > kFormatVersion) {
      return report_error(Error::NotSupported,
                          "payload format version %u, this runtime reads versions %u to %u",
                          graph.version(), kMinFormatVersion, kFormatVersion);
    }
    version_ = graph.version();
    Error error = read_symbols(graph);
    if (error == Error::Ok) error = read_values(graph);
    if (error == Error::Ok) error = read_io(graph);
    if (error == Error::Ok) error = read_ops(graph);
    if (error == Error::Ok) error = check_outputs_written();
    if (error == Error::Ok) error = check_states();
    if (error == Error::Ok) error = check_symbols_from_inputs();
    return error;
  }

 private:
  Error read_symbols(const fb::Graph& graph) {
    const auto* symbols = graph.symbols();
    if (symbols == nullptr || symbols->size() == 0) return Error::Ok;
    if (version_ < kDynamicShapesVersion) {
      return report_error(Error::InvalidProgram,
                          "payload format version %u has symbols, which need version %u", version_,
                          kDynamicShapesVersion);
    }
    if (symbols->size() > kMaxValues) {
      return report_error(Error::InvalidProgram, "payload has %u symbols", symbols->size());
    }
    for (flatbuffers::uoffset_t i = 0; i < symbols->size(); ++i) {
      const fb::Symbol* symbol = symbols->Get(i);
      SymbolSpec spec{string_or(symbol->name(), ""), symbol->min(), symbol->max()};
      if (spec.name.empty()) spec.name = "symbol#" + std::to_string(i);
      if (spec.min < 0 || spec.min > spec.max || spec.max > kMaxSymbolBound) {
        return report_error(Error::InvalidProgram,
                            "symbol %u (%s): bounds [%lld, %lld] are not 0 <= min <= max <= %lld",
                            i, spec.name.c_str(), static_cast<long long>(spec.min),
                            static_cast<long long>(spec.max),
                            static_cast<long long>(kMaxSymbolBound));
      }
      graph_.symbols.push_back(std::move(spec));
    }
    return Error::Ok;
  }

  // Reads and checks one size expression; `where` names it in errors.
  Error read_expr(const fb::SymExpr* expr, const std::string& where, SymExprSpec* out) {
    if (expr == nullptr) {
      return report_error(Error::InvalidProgram, "%s: missing size expression", where.c_str());
    }
    out->offset = expr->offset();
    out->symbols = copy_vector(expr->symbols());
    out->coeffs = copy_vector(expr->coeffs());
    if (out->symbols.size() != out->coeffs.size() || out->symbols.size() > kMaxExprTerms) {
      return report_error(Error::InvalidProgram,
                          "%s: size expression has %zu symbols and %zu coefficients (at most %zu)",
                          where.c_str(), out->symbols.size(), out->coeffs.size(), kMaxExprTerms);
    }
    if (out->offset < -kMaxSymbolBound || out->offset > kMaxSymbolBound) {
      return report_error(Error::InvalidProgram, "%s: size offset %lld out of range",
                          where.c_str(), static_cast<long long>(out->offset));
    }
    for (size_t t = 0; t < out->symbols.size(); ++t) {
      if (out->symbols[t] < 0 || static_cast<size_t>(out->symbols[t]) >= graph_.symbols.size()) {
        return report_error(Error::InvalidProgram, "%s: size refers to symbol %d of %zu",
                            where.c_str(), out->symbols[t], graph_.symbols.size());
      }
      if (out->coeffs[t] < 1 || out->coeffs[t] > kMaxSymbolBound) {
        return report_error(Error::InvalidProgram, "%s: size coefficient %lld is not in [1, %lld]",
                            where.c_str(), static_cast<long long>(out->coeffs[t]),
                            static_cast<long long>(kMaxSymbolBound));
      }
    }
    // Every size the runtime evaluates then fits int64 without overflow.
    __int128 low = 0;
    __int128 high = 0;
    expr_range(*out, &low, &high);
    if (low < -kMaxSymbolBound || high > kMaxSymbolBound) {
      return report_error(Error::InvalidProgram, "%s: size ranges over [%lld, %lld], beyond %lld",
                          where.c_str(), static_cast<long long>(low), static_cast<long long>(high),
                          static_cast<long long>(kMaxSymbolBound));
    }
    return Error::Ok;
  }

  // The smallest and largest value of a checked expression (coefficients are positive).
  void expr_range(const SymExprSpec& expr, __int128* low, __int128* high) const {
    *low = *high = expr.offset;
    for (size_t t = 0; t < expr.symbols.size(); ++t) {
      const SymbolSpec& symbol = graph_.symbols[expr.symbols[t]];
      *low += static_cast<__int128>(expr.coeffs[t]) * symbol.min;
      *high += static_cast<__int128>(expr.coeffs[t]) * symbol.max;
    }
  }

  // Value.dim_*: present for every dimension or none; a symbolic dimension's expression stays
  // inside [dim_min, dim_max] for every symbol value in bounds and dim_max is the recorded size,
  // so the arena planned for `shape` holds the tensor at any size.
  Error read_dims(const fb::Value& value, uint32_t i, ValueSpec* spec) {
    const auto* mins = value.dim_min();
    const auto* maxs = value.dim_max();
    const auto* exprs = value.dim_exprs();
    if (mins == nullptr && maxs == nullptr && exprs == nullptr) return Error::Ok;
    const size_t rank = spec->shape.size();
    if (version_ < kDynamicShapesVersion) {
      return report_error(Error::InvalidProgram,
                          "value %u (%s): symbolic dimensions need payload format version %u", i,
                          spec->name.c_str(), kDynamicShapesVersion);
    }
    if (mins == nullptr || maxs == nullptr || exprs == nullptr || mins->size() != rank ||
        maxs->size() != rank || exprs->size() != rank) {
      return report_error(Error::InvalidProgram,
                          "value %u (%s): dimension bounds and sizes must each have one entry per "
                          "dimension (rank %zu)",
                          i, spec->name.c_str(), rank);
    }
    if (spec->kind == ValueKind::Constant || spec->kind == ValueKind::State) {
      return report_error(Error::InvalidProgram, "%s value %u (%s) has symbolic dimensions",
                          spec->kind == ValueKind::State ? "state" : "constant", i,
                          spec->name.c_str());
    }
    spec->dim_min = copy_vector(mins);
    spec->dim_max = copy_vector(maxs);
    spec->dim_exprs.resize(rank);
    bool any_symbolic = false;
    for (size_t d = 0; d < rank; ++d) {
      const std::string where =
          "value " + std::to_string(i) + " (" + spec->name + ") dimension " + std::to_string(d);
      Error error = read_expr(exprs->Get(static_cast<flatbuffers::uoffset_t>(d)), where,
                              &spec->dim_exprs[d]);
      if (error != Error::Ok) return error;
      const SymExprSpec& expr = spec->dim_exprs[d];
      const int64_t low = spec->dim_min[d];
      const int64_t high = spec->dim_max[d];
      const long long size = static_cast<long long>(spec->shape[d]);
      if (expr.is_static()) {
        if (low != spec->shape[d] || high != spec->shape[d] || expr.offset != spec->shape[d]) {
          return report_error(Error::InvalidProgram,
                              "%s: static size %lld but bounds [%lld, %lld], expression %lld",
                              where.c_str(), size, static_cast<long long>(low),
                              static_cast<long long>(high), static_cast<long long>(expr.offset));
        }
        continue;
      }
      any_symbolic = true;
      __int128 expr_low = 0;
      __int128 expr_high = 0;
      expr_range(expr, &expr_low, &expr_high);
      if (low < 0 || low > high || high > kMaxSymbolBound || high != spec->shape[d] ||
          expr_low < low || expr_high > high) {
        return report_error(Error::InvalidProgram,
                            "%s: bounds [%lld, %lld] of a symbolic size are not 0 <= min <= max "
                            "<= %lld with max the recorded size %lld and the size's range "
                            "[%lld, %lld] inside them",
                            where.c_str(), static_cast<long long>(low),
                            static_cast<long long>(high), static_cast<long long>(kMaxSymbolBound),
                            size, static_cast<long long>(expr_low),
                            static_cast<long long>(expr_high));
      }
    }
    if (!any_symbolic) {
      spec->dim_min.clear();
      spec->dim_max.clear();
      spec->dim_exprs.clear();
    }
    return Error::Ok;
  }

  // Every symbol must be readable off an input: some input dimension is `offset + coeff * s`.
  Error check_symbols_from_inputs() {
    std::vector<bool> found(graph_.symbols.size(), false);
    for (int32_t id : graph_.inputs) {
      for (const SymExprSpec& expr : graph_.values[id].dim_exprs) {
        if (expr.symbols.size() == 1) found[expr.symbols[0]] = true;
      }
    }
    for (size_t s = 0; s < found.size(); ++s) {
      if (!found[s]) {
        return report_error(Error::InvalidProgram,
                            "symbol %zu (%s) is no input dimension's size: the runtime could not "
                            "know its value",
                            s, graph_.symbols[s].name.c_str());
      }
    }
    return Error::Ok;
  }

  // An IntArg, with its size expression when it is symbolic (IntArg.expr).
  Error read_int(const fb::IntArg& value, size_t op, size_t index, ArgValue* out) {
    out->type = ArgValue::Type::Int;
    out->int_value = value.value();
    if (value.expr() == nullptr) return Error::Ok;
    const std::string where = "op " + std::to_string(op) + " (" + graph_.ops[op].name +
                              ") argument " + std::to_string(index);
    if (version_ < kDynamicShapesVersion) {
      return report_error(Error::InvalidProgram, "%s: a symbolic int needs version %u",
                          where.c_str(), kDynamicShapesVersion);
    }
    return read_expr(value.expr(), where, &out->int_expr);
  }

  // A symbolic int argument (IntArg.expr / IntListArg.exprs): its recorded value is the upper
  // bound's, a static entry's expression is the value itself.
  Error read_int_exprs(const flatbuffers::Vector<flatbuffers::Offset<fb::SymExpr>>* exprs,
                       size_t op, size_t index, ArgValue* out) {
    if (exprs == nullptr || exprs->size() == 0) return Error::Ok;
    const std::string where = "op " + std::to_string(op) + " (" + graph_.ops[op].name +
                              ") argument " + std::to_string(index);
    if (version_ < kDynamicShapesVersion || exprs->size() != out->ints.size()) {
      return report_error(Error::InvalidProgram,
                          "%s: %u size expressions for %zu ints (version %u)", where.c_str(),
                          exprs->size(), out->ints.size(), version_);
    }
    out->int_exprs.resize(out->ints.size());
    for (size_t e = 0; e < out->ints.size(); ++e) {
      Error error = read_expr(exprs->Get(static_cast<flatbuffers::uoffset_t>(e)), where,
                              &out->int_exprs[e]);
      if (error != Error::Ok) return error;
      if (out->int_exprs[e].is_static() && out->int_exprs[e].offset != out->ints[e]) {
        return report_error(Error::InvalidProgram, "%s: entry %zu is %lld, its expression %lld",
                            where.c_str(), e, static_cast<long long>(out->ints[e]),
                            static_cast<long long>(out->int_exprs[e].offset));
      }
    }
    return Error::Ok;
  }

  Error read_values(const fb::Graph& graph) {
    const auto* values = graph.values();
    if (values == nullptr || values->size() > kMaxValues) {
      return report_error(Error::InvalidProgram, "payload has %s values table",
                          values == nullptr ? "no" : "an oversized");
    }
    graph_.values.resize(values->size());
    for (flatbuffers::uoffset_t i = 0; i < values->size(); ++i) {
      const fb::Value* value = values->Get(i);
      ValueSpec& spec = graph_.values[i];
      spec.name = string_or(value->name(), "");
      if (spec.name.empty()) spec.name = "value#" + std::to_string(i);
      spec.dtype = static_cast<ScalarType>(static_cast<int8_t>(value->dtype()));
      size_t item = element_size(spec.dtype);
      if (item == 0) {
        return report_error(Error::InvalidProgram, "value %u (%s): unsupported dtype %d", i,
                            spec.name.c_str(), static_cast<int>(value->dtype()));
      }
      int kind = static_cast<int>(value->kind());
      if (kind < 0 || kind > static_cast<int>(ValueKind::State)) {
        return report_error(Error::InvalidProgram, "value %u (%s): unknown kind %d", i,
                            spec.name.c_str(), kind);
      }
      spec.kind = static_cast<ValueKind>(kind);
      if (spec.kind == ValueKind::State && version_ < kStateVersion) {
        return report_error(Error::InvalidProgram,
                            "value %u (%s): a State value needs payload format version %u", i,
                            spec.name.c_str(), kStateVersion);
      }
      spec.state_update = value->state_update();
      if (spec.kind != ValueKind::State && spec.state_update != -1) {
        return report_error(Error::InvalidProgram,
                            "value %u (%s): state_update %d on a value that is not State", i,
                            spec.name.c_str(), spec.state_update);
      }
      const std::vector<int64_t> shape = copy_vector(value->shape());
      size_t rank = shape.size();
      if (rank > kMaxRank) {
        return report_error(Error::InvalidProgram, "value %u (%s): rank %zu exceeds %zu", i,
                            spec.name.c_str(), rank, kMaxRank);
      }
      // ExecuTorch tensors use 32-bit sizes and strides: every dim and the product of the
      // non-zero dims (the largest stride) must fit; the byte count then cannot overflow.
      int64_t span = 1;
      bool empty = false;
      for (size_t d = 0; d < rank; ++d) {
        int64_t size = shape[d];
        if (size < 0 || size > INT32_MAX) {
          return report_error(Error::InvalidProgram, "value %u (%s): invalid size %lld at dim %zu",
                              i, spec.name.c_str(), static_cast<long long>(size), d);
        }
        spec.shape.push_back(size);
        if (size == 0) {
          empty = true;
          continue;
        }
        span *= size;
        if (span > INT32_MAX) {
          return report_error(Error::InvalidProgram, "value %u (%s): more than 2^31 elements", i,
                              spec.name.c_str());
        }
      }
      size_t bytes = empty ? 0 : static_cast<size_t>(span) * item;
      if (bytes > kMaxTensorBytes) {
        return report_error(Error::InvalidProgram, "value %u (%s): %zu bytes exceed the limit %zu",
                            i, spec.name.c_str(), bytes, kMaxTensorBytes);
      }
      spec.nbytes = bytes;
      Error dims_error = read_dims(*value, i, &spec);
      if (dims_error != Error::Ok) return dims_error;
      if (spec.kind == ValueKind::Constant || spec.kind == ValueKind::State) {
        spec.constant_key = string_or(value->constant_key(), "");
        if (spec.constant_key.empty()) {
          return report_error(Error::InvalidProgram, "%s value %u (%s) has no constant_key",
                              spec.kind == ValueKind::State ? "state" : "constant", i,
                              spec.name.c_str());
        }
      }
    }
    return Error::Ok;
  }

  Error read_io(const fb::Graph& graph) {
    const size_t count = graph_.values.size();
    std::vector<int> input_uses(count, 0);
    if (graph.inputs() != nullptr) {
      for (int32_t id : copy_vector(graph.inputs())) {
        if (id < 0 || static_cast<size_t>(id) >= count) {
          return report_error(Error::InvalidProgram, "graph input refers to value %d of %zu", id,
                              count);
        }
        if (graph_.values[id].kind != ValueKind::Input || input_uses[id]++ > 0) {
          return report_error(Error::InvalidProgram,
                              "graph input value %d (%s) is not a distinct Input value", id,
                              graph_.values[id].name.c_str());
        }
        graph_.inputs.push_back(id);
      }
    }
    for (size_t i = 0; i < count; ++i) {
      if (graph_.values[i].kind == ValueKind::Input && input_uses[i] == 0) {
        return report_error(Error::InvalidProgram, "Input value %zu (%s) is not a graph input", i,
                            graph_.values[i].name.c_str());
      }
    }
    std::vector<int> output_uses(count, 0);
    if (graph.outputs() != nullptr) {
      for (int32_t id : copy_vector(graph.outputs())) {
        if (id < 0 || static_cast<size_t>(id) >= count) {
          return report_error(Error::InvalidProgram, "graph output refers to value %d of %zu", id,
                              count);
        }
        ++output_uses[id];
        graph_.outputs.push_back(id);
      }
    }
    for (size_t i = 0; i < count; ++i) {
      if (graph_.values[i].kind == ValueKind::Output && output_uses[i] == 0) {
        return report_error(Error::InvalidProgram, "Output value %zu (%s) is not a graph output",
                            i, graph_.values[i].name.c_str());
      }
    }
    return Error::Ok;
  }

  Error read_ops(const fb::Graph& graph) {
    const auto* ops = graph.ops();
    if (ops == nullptr) return Error::Ok;
    if (ops->size() > kMaxOps) {
      return report_error(Error::InvalidProgram, "payload has %u ops", ops->size());
    }
    graph_.ops.resize(ops->size());
    for (flatbuffers::uoffset_t i = 0; i < ops->size(); ++i) {
      Error error = read_op(*ops->Get(i), i);
      if (error != Error::Ok) return error;
    }
    return Error::Ok;
  }

  Error read_op(const fb::Op& op, size_t index) {
    OpSpec& spec = graph_.ops[index];
    spec.name = string_or(op.name(), "");
    if (spec.name.empty()) spec.name = "op#" + std::to_string(index);
    spec.route = string_or(op.route(), "");
    spec.kernel = string_or(op.kernel(), "");
    spec.provider = static_cast<uint8_t>(op.provider());
    spec.flags = static_cast<uint32_t>(op.flags());
    const char* signature = find_kernel_signature(spec.kernel.c_str());
    if (signature == nullptr) {
      return report_error(Error::InvalidProgram,
                          "op %zu (%s, route '%s'): unknown kernel '%s' (no such out-variant "
                          "schema)",
                          index, spec.name.c_str(), spec.route.c_str(), spec.kernel.c_str());
    }
    std::vector<ArgSpec> expected = parse_signature(signature);
    const auto* args = op.args();
    size_t count = args == nullptr ? 0 : args->size();
    if (count != expected.size()) {
      return report_error(Error::InvalidProgram,
                          "op %zu (%s): kernel %s takes %zu arguments (%s), payload has %zu",
                          index, spec.name.c_str(), spec.kernel.c_str(), expected.size(),
                          signature, count);
    }
    bool has_optional_list = false;
    for (const ArgSpec& arg : expected) has_optional_list |= arg.kind == 'O';
    if ((spec.flags & fb::RouteFlags_OptionalTensorLists) != 0 && !has_optional_list) {
      return report_error(Error::InvalidProgram,
                          "op %zu (%s): route flagged optional_tensor_lists but kernel %s has no "
                          "Tensor?[] argument",
                          index, spec.name.c_str(), spec.kernel.c_str());
    }
    // Outs are recorded after all inputs are checked: an op may not read what it writes.
    std::vector<int32_t> writes;
    spec.args.resize(count);
    for (size_t a = 0; a < count; ++a) {
      const fb::Argument* argument = args->Get(static_cast<flatbuffers::uoffset_t>(a));
      Error error = read_arg(argument, expected[a], index, a, &spec.args[a], &writes);
      if (error != Error::Ok) return error;
    }
    for (int32_t id : writes) {
      ValueSpec& value = graph_.values[id];
      if (value.producer >= 0) {
        return report_error(Error::InvalidProgram, "op %zu (%s) writes value %d (%s) again", index,
                            spec.name.c_str(), id, value.name.c_str());
      }
      value.producer = static_cast<int64_t>(index);
      value.last_use = static_cast<int64_t>(index);
    }
    if (is_quantized_kernel(spec.kernel)) {
      if (version_ < kQuantizedOpsVersion) {
        return report_error(Error::InvalidProgram,
                            "op %zu (%s): kernel %s needs payload format version %u, payload has %u",
                            index, spec.name.c_str(), spec.kernel.c_str(), kQuantizedOpsVersion,
                            version_);
      }
      return check_quantized_op(graph_, index);
    }
    return Error::Ok;
  }

  // A tensor the op reads: it must exist before this op.
  Error use_tensor(int32_t id, size_t op, size_t arg) {
    if (id < 0 || static_cast<size_t>(id) >= graph_.values.size()) {
      return report_error(Error::InvalidProgram, "op %zu (%s) argument %zu: value %d out of range",
                          op, graph_.ops[op].name.c_str(), arg, id);
    }
    ValueSpec& value = graph_.values[id];
    bool ready = value.kind == ValueKind::Input || value.kind == ValueKind::Constant ||
                 value.kind == ValueKind::State || value.producer >= 0;
    if (!ready) {
      return report_error(Error::InvalidProgram,
                          "op %zu (%s) argument %zu reads value %d (%s) before any op writes it",
                          op, graph_.ops[op].name.c_str(), arg, id, value.name.c_str());
    }
    value.last_use = static_cast<int64_t>(op);
    return Error::Ok;
  }

  // A tensor the op writes (an out argument): an Intermediate or Output not yet written.
  Error write_tensor(int32_t id, size_t op, size_t arg, std::vector<int32_t>* writes) {
    if (id < 0 || static_cast<size_t>(id) >= graph_.values.size()) {
      return report_error(Error::InvalidProgram, "op %zu (%s) out argument %zu: value %d out of "
                          "range", op, graph_.ops[op].name.c_str(), arg, id);
    }
    const ValueSpec& value = graph_.values[id];
    if (value.kind != ValueKind::Intermediate && value.kind != ValueKind::Output) {
      return report_error(Error::InvalidProgram,
                          "op %zu (%s) writes value %d (%s), which is a graph input or constant "
                          "(or a state)",
                          op, graph_.ops[op].name.c_str(), id, value.name.c_str());
    }
    for (int32_t other : *writes) {
      if (other == id) {
        return report_error(Error::InvalidProgram, "op %zu (%s) writes value %d (%s) twice", op,
                            graph_.ops[op].name.c_str(), id, value.name.c_str());
      }
    }
    writes->push_back(id);
    return Error::Ok;
  }

  Error mismatch(size_t op, size_t arg, const ArgSpec& expected, const char* got) {
    return report_error(Error::InvalidProgram,
                        "op %zu (%s) argument %zu: kernel %s expects kind '%c'%s, payload has %s",
                        op, graph_.ops[op].name.c_str(), arg, graph_.ops[op].kernel.c_str(),
                        expected.kind, expected.optional ? " (or None)" : "", got);
  }

  Error read_arg(const fb::Argument* argument, const ArgSpec& expected, size_t op, size_t index,
                 ArgValue* out, std::vector<int32_t>* writes) {
    using Type = ArgValue::Type;
    if (argument == nullptr || argument->value_type() == fb::Arg_NONE) {
      return mismatch(op, index, expected, "no value");
    }
    if (argument->value_as_NoneArg() != nullptr) {
      if (!expected.optional) return mismatch(op, index, expected, "None");
      out->type = Type::None;
      return Error::Ok;
    }
    switch (expected.kind) {
      case 'T':
      case 'W': {
        const auto* tensor = argument->value_as_TensorArg();
        if (tensor == nullptr) return mismatch(op, index, expected, "a non-tensor");
        out->type = Type::Tensor;
        out->tensor = tensor->value();
        return expected.kind == 'T' ? use_tensor(out->tensor, op, index)
                                    : write_tensor(out->tensor, op, index, writes);
      }
      case 'L':
      case 'V': {
        const auto* list = argument->value_as_TensorListArg();
        if (list == nullptr) return mismatch(op, index, expected, "a non-tensor-list");
        out->type = Type::TensorList;
        out->tensors = copy_vector(list->values());
        for (int32_t id : out->tensors) {
          Error error = expected.kind == 'L' ? use_tensor(id, op, index)
                                             : write_tensor(id, op, index, writes);
          if (error != Error::Ok) return error;
        }
        return Error::Ok;
      }
      case 'O': {
        // Tensor?[]: a plain tensor list is bound as a list of optionals (all present).
        const flatbuffers::Vector<int32_t>* ids = nullptr;
        bool allow_none = false;
        if (const auto* list = argument->value_as_OptionalTensorListArg()) {
          ids = list->values();
          allow_none = true;
        } else if (const auto* plain = argument->value_as_TensorListArg()) {
          ids = plain->values();
        } else {
          return mismatch(op, index, expected, "a non-tensor-list");
        }
        out->type = Type::OptionalTensorList;
        out->tensors = copy_vector(ids);
        for (int32_t id : out->tensors) {
          if (id == -1 && allow_none) continue;
          Error error = use_tensor(id, op, index);
          if (error != Error::Ok) return error;
        }
        return Error::Ok;
      }
      case 'i':
      case 'e': {
        const auto* value = argument->value_as_IntArg();
        if (value == nullptr) return mismatch(op, index, expected, "a non-int");
        return read_int(*value, op, index, out);
      }
      case 'y': {
        const auto* value = argument->value_as_ScalarTypeArg();
        if (value == nullptr) return mismatch(op, index, expected, "a non-ScalarType");
        int dtype = value->value();
        if (dtype < 0 || dtype >= static_cast<int>(ScalarType::NumOptions)) {
          return report_error(Error::InvalidProgram, "op %zu (%s) argument %zu: invalid ScalarType "
                              "%d", op, graph_.ops[op].name.c_str(), index, dtype);
        }
        out->type = Type::Int;
        out->int_value = dtype;
        return Error::Ok;
      }
      case 'f': {
        // An integral literal for a float parameter is widened, as torch does.
        if (const auto* value = argument->value_as_DoubleArg()) {
          out->double_value = value->value();
        } else if (const auto* integral = argument->value_as_IntArg()) {
          out->double_value = static_cast<double>(integral->value());
        } else {
          return mismatch(op, index, expected, "a non-float");
        }
        out->type = Type::Double;
        return Error::Ok;
      }
      case 'b': {
        const auto* value = argument->value_as_BoolArg();
        if (value == nullptr) return mismatch(op, index, expected, "a non-bool");
        out->type = Type::Bool;
        out->bool_value = value->value();
        return Error::Ok;
      }
      case 's': {
        if (const auto* value = argument->value_as_IntArg()) {
          Error error = read_int(*value, op, index, out);
          if (error != Error::Ok) return error;
        } else if (const auto* real = argument->value_as_DoubleArg()) {
          out->type = Type::Double;
          out->double_value = real->value();
        } else if (const auto* flag = argument->value_as_BoolArg()) {
          out->type = Type::Bool;
          out->bool_value = flag->value();
        } else {
          return mismatch(op, index, expected, "a non-scalar");
        }
        return Error::Ok;
      }
      case 'I': {
        const auto* list = argument->value_as_IntListArg();
        if (list == nullptr) return mismatch(op, index, expected, "a non-int-list");
        out->type = Type::IntList;
        out->ints = copy_vector(list->values());
        return read_int_exprs(list->exprs(), op, index, out);
      }
      case 'F': {
        const auto* list = argument->value_as_DoubleListArg();
        if (list == nullptr) return mismatch(op, index, expected, "a non-float-list");
        out->type = Type::DoubleList;
        out->doubles = copy_vector(list->values());
        return Error::Ok;
      }
      case 'B': {
        const auto* list = argument->value_as_BoolListArg();
        if (list == nullptr) return mismatch(op, index, expected, "a non-bool-list");
        out->type = Type::BoolList;
        if (list->values() != nullptr) {
          for (uint8_t flag : *list->values()) out->bools.push_back(flag != 0);
        }
        return Error::Ok;
      }
      case 'S': {
        const auto* text = argument->value_as_StringArg();
        if (text == nullptr || text->value() == nullptr) {
          return mismatch(op, index, expected, "a non-string");
        }
        out->type = Type::String;
        out->string_value = text->value()->str();
        return Error::Ok;
      }
      default:
        return report_error(Error::NotSupported,
                            "op %zu (%s) argument %zu: kernel %s has an argument kind ('%c') this "
                            "runtime cannot bind",
                            op, graph_.ops[op].name.c_str(), index, graph_.ops[op].kernel.c_str(),
                            expected.kind);
    }
  }

  Error check_outputs_written() {
    for (int32_t id : graph_.outputs) {
      const ValueSpec& value = graph_.values[id];
      if (value.kind == ValueKind::Intermediate && value.producer < 0) {
        return report_error(Error::InvalidProgram, "graph output value %d (%s) is never written",
                            id, value.name.c_str());
      }
    }
    for (size_t i = 0; i < graph_.values.size(); ++i) {
      const ValueSpec& value = graph_.values[i];
      if (value.kind == ValueKind::Output && value.producer < 0) {
        return report_error(Error::InvalidProgram, "Output value %zu (%s) is never written", i,
                            value.name.c_str());
      }
    }
    return Error::Ok;
  }

  // Each State's update: an op result (Intermediate, written by an op) of the state's dtype and
  // static shape, and the update of this state only.
  Error check_states() {
    std::vector<bool> taken(graph_.values.size(), false);
    for (size_t i = 0; i < graph_.values.size(); ++i) {
      const ValueSpec& state = graph_.values[i];
      if (state.kind != ValueKind::State) continue;
      const int32_t id = state.state_update;
      if (id < 0 || static_cast<size_t>(id) >= graph_.values.size()) {
        return report_error(Error::InvalidProgram,
                            "state value %zu (%s): state_update refers to value %d of %zu", i,
                            state.name.c_str(), id, graph_.values.size());
      }
      const ValueSpec& update = graph_.values[id];
      if (update.kind != ValueKind::Intermediate || update.producer < 0 || taken[id]) {
        return report_error(Error::InvalidProgram,
                            "state value %zu (%s): its update, value %d (%s), is not an op result "
                            "written back into this state only",
                            i, state.name.c_str(), id, update.name.c_str());
      }
      if (update.dtype != state.dtype || update.shape != state.shape || update.is_dynamic()) {
        return report_error(Error::InvalidProgram,
                            "state value %zu (%s): its update, value %d (%s), has another dtype or "
                            "shape",
                            i, state.name.c_str(), id, update.name.c_str());
      }
      taken[id] = true;
    }
    return Error::Ok;
  }

  GraphSpec& graph_;
  uint32_t version_ = 0;
};

}  // namespace

int64_t evaluate_size(const SymExprSpec& expr, const std::vector<int64_t>& symbols) {
  int64_t size = expr.offset;
  for (size_t t = 0; t < expr.symbols.size(); ++t) size += expr.coeffs[t] * symbols[expr.symbols[t]];
  return size;
}

Error read_payload(const void* data, size_t size, GraphSpec* out) {
  *out = GraphSpec();
  if (data == nullptr || size < 8) {
    return report_error(Error::InvalidProgram, "payload of %zu bytes is too short", size);
  }
  // Table fields are aligned relative to the buffer's start: give the reader an 8-aligned copy
  // when the caller's bytes are not (ExecuTorch's usually are).
  std::vector<uint64_t> aligned;
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.resize((size + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    std::memcpy(aligned.data(), data, size);
    data = aligned.data();
  }
  // The verifier bounds every offset, vector and string before any accessor runs.
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(data), size,
                                 /*max_depth=*/64, /*max_tables=*/size_t{1} << 22);
  if (!fb::VerifyGraphBuffer(verifier)) {
    return report_error(Error::InvalidProgram,
                        "payload of %zu bytes is not a valid CPU-delegate flatbuffer (identifier "
                        "'%s', verifier failed)",
                        size, fb::GraphIdentifier());
  }
  Reader reader(out);
  Error error = reader.read(*fb::GetGraph(data));
  if (error != Error::Ok) *out = GraphSpec();
  return error;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
