// In-place writes of delegate state (a KV cache the delegate owns, ValueKind::State).
//
// A cache update exports as `index_put(cache, [None, None, input_pos], k)` (index_copy_ decomposes
// to the same), whose out-variant kernel copies the whole cache into its out tensor before writing
// the indexed rows. When the runtime can prove that running it on the state's own bytes is the
// same (compiled_graph.cc, CompiledGraph::plan_states), it binds one of these kernels instead:
// they write only the indexed rows, and the op's result aliases the state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <executorch/runtime/core/evalue.h>

#include "backends/cpu/runtime/kernel_provider.h"
#include "backends/cpu/runtime/payload_reader.h"

namespace et_cpu_plugin {
namespace cpu {

// Whether `op` only writes rows of its first argument, in a form these kernels run:
// aten::index_put.out with accumulate=False and exactly one index tensor (int64 or int32, rank 1),
// or aten::index_copy.out with a rank-1 int64 index; `values` of the same dtype as `self`.
// Sets *self to the value id of the tensor written.
bool is_row_write(const GraphSpec& graph, const OpSpec& op, int32_t* self);

// The in-place kernel of a row write `op` (is_row_write); `tensor(id)` is the graph's bound
// tensor of value `id`. It writes `self` (whose bytes the out tensor shares); indices are
// checked before any row is written: an index outside [-size, size) (index_put) or [0, size)
// (index_copy) fails naming the op, the index, its position and the dimension's size.
std::unique_ptr<BoundKernel> make_row_write(
    const GraphSpec& graph, const OpSpec& op,
    const std::function<executorch::runtime::EValue*(int32_t)>& tensor);

}  // namespace cpu
}  // namespace et_cpu_plugin
