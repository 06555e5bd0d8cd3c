// Symbolic dimensions at run time: read the symbols' values off the delegate's inputs (checking
// every dimension against its bounds), and specialize the graph to them (each shape, byte count
// and symbolic int argument evaluated), so a CompiledGraph can be built for concrete sizes.
#pragma once

#include <cstdint>
#include <vector>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/span.h>

#include "backends/cpu/runtime/payload_reader.h"

namespace et_cpu_plugin {
namespace cpu {

// The symbols' values given the delegate's inputs (`inputs[i]` is graph input i). A dimension
// outside its bounds, a static dimension of another size, a wrong rank or inputs that disagree on
// a symbol are an error naming the input, the dimension, the value and the bound.
executorch::runtime::Error solve_symbols(const GraphSpec& graph,
                                         executorch::runtime::Span<executorch::runtime::EValue*>
                                             inputs,
                                         std::vector<int64_t>* symbols);

// The symbols at their upper bounds: the sizes the graph's recorded shapes are for.
std::vector<int64_t> upper_bounds(const GraphSpec& graph);

// `graph` with every symbolic size evaluated at `symbols` (a static copy: no symbols left).
GraphSpec specialize(const GraphSpec& graph, const std::vector<int64_t>& symbols);

// `value`'s shape at `symbols`.
std::vector<int64_t> concrete_shape(const ValueSpec& value, const std::vector<int64_t>& symbols);

}  // namespace cpu
}  // namespace et_cpu_plugin
