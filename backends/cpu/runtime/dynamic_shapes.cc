#include "backends/cpu/runtime/dynamic_shapes.h"

#include <string>

#include "backends/cpu/runtime/error_report.h"

namespace et_cpu_plugin {
namespace cpu {

using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::Span;

namespace {

std::string bounds_string(int64_t low, int64_t high) {
  return "[" + std::to_string(low) + ", " + std::to_string(high) + "]";
}

}  // namespace

Error solve_symbols(const GraphSpec& graph, Span<EValue*> inputs, std::vector<int64_t>* symbols) {
  constexpr int64_t kUnknown = -1;
  symbols->assign(graph.symbols.size(), kUnknown);
  std::vector<size_t> given_by(graph.symbols.size(), 0);
  for (size_t i = 0; i < graph.inputs.size() && i < inputs.size(); ++i) {
    const ValueSpec& value = graph.values[graph.inputs[i]];
    if (inputs[i] == nullptr || !inputs[i]->isTensor()) continue;  // check_io reports it
    const auto& tensor = inputs[i]->toTensor();
    const size_t rank = value.shape.size();
    if (static_cast<size_t>(tensor.dim()) != rank) {
      return report_error(Error::InvalidArgument, "input %zu (%s): expected rank %zu, got rank %zd",
                          i, value.name.c_str(), rank, static_cast<ssize_t>(tensor.dim()));
    }
    for (size_t d = 0; d < rank; ++d) {
      const int64_t size = tensor.size(static_cast<ssize_t>(d));
      if (!value.is_dynamic() || value.dim_exprs[d].is_static()) {
        if (size != value.shape[d]) {
          return report_error(Error::InvalidArgument,
                              "input %zu (%s): dimension %zu is %lld, expected %lld (a static "
                              "dimension)",
                              i, value.name.c_str(), d, static_cast<long long>(size),
                              static_cast<long long>(value.shape[d]));
        }
        continue;
      }
      if (size < value.dim_min[d] || size > value.dim_max[d]) {
        return report_error(Error::InvalidArgument,
                            "input %zu (%s): dimension %zu is %lld, outside its bounds %s",
                            i, value.name.c_str(), d, static_cast<long long>(size),
                            bounds_string(value.dim_min[d], value.dim_max[d]).c_str());
      }
      const SymExprSpec& expr = value.dim_exprs[d];
      if (expr.symbols.size() != 1) continue;  // checked once every symbol is known
      const int32_t s = expr.symbols[0];
      const int64_t scaled = size - expr.offset;
      if (scaled % expr.coeffs[0] != 0) {
        return report_error(Error::InvalidArgument,
                            "input %zu (%s): dimension %zu is %lld, not %lld * %s + %lld", i,
                            value.name.c_str(), d, static_cast<long long>(size),
                            static_cast<long long>(expr.coeffs[0]), graph.symbols[s].name.c_str(),
                            static_cast<long long>(expr.offset));
      }
      const int64_t solved = scaled / expr.coeffs[0];
      const SymbolSpec& symbol = graph.symbols[s];
      if (solved < symbol.min || solved > symbol.max) {
        return report_error(Error::InvalidArgument,
                            "input %zu (%s): dimension %zu is %lld, so %s = %lld, outside its "
                            "bounds %s",
                            i, value.name.c_str(), d, static_cast<long long>(size),
                            symbol.name.c_str(), static_cast<long long>(solved),
                            bounds_string(symbol.min, symbol.max).c_str());
      }
      if ((*symbols)[s] != kUnknown && (*symbols)[s] != solved) {
        return report_error(Error::InvalidArgument,
                            "input %zu (%s): dimension %zu is %lld, so %s = %lld, but input %zu "
                            "gave %s = %lld",
                            i, value.name.c_str(), d, static_cast<long long>(size),
                            symbol.name.c_str(), static_cast<long long>(solved), given_by[s],
                            symbol.name.c_str(), static_cast<long long>((*symbols)[s]));
      }
      (*symbols)[s] = solved;
      given_by[s] = i;
    }
  }
  for (size_t s = 0; s < symbols->size(); ++s) {
    if ((*symbols)[s] == kUnknown) {  // the reader guarantees an input dimension gives it
      return report_error(Error::InvalidArgument, "no input gave a value to symbol %s",
                          graph.symbols[s].name.c_str());
    }
  }
  // Dimensions of several symbols: now that every symbol is known, they must agree.
  for (size_t i = 0; i < graph.inputs.size() && i < inputs.size(); ++i) {
    const ValueSpec& value = graph.values[graph.inputs[i]];
    if (!value.is_dynamic() || inputs[i] == nullptr || !inputs[i]->isTensor()) continue;
    for (size_t d = 0; d < value.shape.size(); ++d) {
      const int64_t size = inputs[i]->toTensor().size(static_cast<ssize_t>(d));
      const int64_t expected = evaluate_size(value.dim_exprs[d], *symbols);
      if (size != expected) {
        return report_error(Error::InvalidArgument,
                            "input %zu (%s): dimension %zu is %lld, the other inputs' sizes make "
                            "it %lld",
                            i, value.name.c_str(), d, static_cast<long long>(size),
                            static_cast<long long>(expected));
      }
    }
  }
  return Error::Ok;
}

std::vector<int64_t> upper_bounds(const GraphSpec& graph) {
  std::vector<int64_t> symbols;
  for (const SymbolSpec& symbol : graph.symbols) symbols.push_back(symbol.max);
  return symbols;
}

std::vector<int64_t> concrete_shape(const ValueSpec& value, const std::vector<int64_t>& symbols) {
  if (!value.is_dynamic()) return value.shape;
  std::vector<int64_t> shape;
  for (const SymExprSpec& expr : value.dim_exprs) shape.push_back(evaluate_size(expr, symbols));
  return shape;
}

GraphSpec specialize(const GraphSpec& graph, const std::vector<int64_t>& symbols) {
  // Built field by field rather than copied and cleared: a dynamic value's bounds and size
  // expressions (a vector per dimension) were most of the copy's allocations, each freed again.
  GraphSpec out;
  out.inputs = graph.inputs;
  out.outputs = graph.outputs;
  out.ops = graph.ops;
  out.values.reserve(graph.values.size());
  for (const ValueSpec& value : graph.values) {
    if (!value.is_dynamic()) {
      out.values.push_back(value);
      continue;
    }
    // Every field of ValueSpec but the symbolic ones (dim_min, dim_max, dim_exprs).
    ValueSpec& sized = out.values.emplace_back();
    sized.dtype = value.dtype;
    sized.kind = value.kind;
    sized.constant_key = value.constant_key;
    sized.name = value.name;
    sized.state_update = value.state_update;
    sized.producer = value.producer;
    sized.last_use = value.last_use;
    // Sizes lie inside the recorded bounds (reader + solve_symbols), so bytes only shrink.
    sized.shape.reserve(value.dim_exprs.size());
    size_t elements = 1;
    for (const SymExprSpec& expr : value.dim_exprs) {
      sized.shape.push_back(evaluate_size(expr, symbols));
      elements *= static_cast<size_t>(sized.shape.back());
    }
    sized.nbytes = elements * element_size(value.dtype);
  }
  for (OpSpec& op : out.ops) {
    for (ArgValue& arg : op.args) {
      if (!arg.int_expr.is_static()) arg.int_value = evaluate_size(arg.int_expr, symbols);
      for (size_t e = 0; e < arg.int_exprs.size(); ++e) {
        arg.ints[e] = evaluate_size(arg.int_exprs[e], symbols);
      }
      arg.int_expr = SymExprSpec();
      arg.int_exprs.clear();
    }
  }
  return out;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
