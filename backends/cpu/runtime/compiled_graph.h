// Compile once, run many: a CompiledGraph is built in `init` from a validated GraphSpec (tensors
// with their planned arena slots and constants, kernel arguments as EValues, each op bound to a
// provider) and executed by `execute`, which only binds the delegate's inputs and outputs after
// checking their dtype and shape.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/event_tracer.h>
#include <executorch/runtime/core/freeable_buffer.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/core/named_data_map.h>
#include <executorch/runtime/core/result.h>
#include <executorch/runtime/core/span.h>

#include "backends/cpu/runtime/kernel_provider.h"
#include "backends/cpu/runtime/payload_reader.h"

namespace et_cpu_plugin {
namespace cpu {

class CompiledGraph {
 public:
  // Reads, verifies and compiles `size` bytes of payload. `constants` may be null only when the
  // graph has no Constant values.
  static executorch::runtime::Error compile(const void* data, size_t size,
                                            const executorch::runtime::NamedDataMap* constants,
                                            std::unique_ptr<CompiledGraph>* out);

  // Runs the graph on the delegate's arguments: inputs first, then outputs, in payload order.
  // One call at a time: while a call runs, a call from another thread fails with InvalidState
  // (the runtime README's "Threads"); different graphs run on any threads at once.
  // With an event tracer (ETDump), logs one profiling event per kernel call, named after the
  // nodes it covers and its provider; without one (and without ET_CPU_PROFILE) no clock is read.
  executorch::runtime::Error execute(executorch::runtime::Span<executorch::runtime::EValue*> args,
                                     executorch::runtime::MemoryAllocator* temp_allocator,
                                     executorch::runtime::EventTracer* tracer = nullptr);

  // A graph with symbolic dimensions runs each concrete size on a graph compiled for it (its
  // providers' plans prepared for those shapes; constants and, when it fits, the arena shared
  // with this one, which is planned for the upper bounds). At most this many are kept, least
  // recently used dropped first (ET_CPU_SHAPE_PLANS, default 8).
  size_t shape_plan_hits() const { return shape_plan_hits_; }
  size_t shape_plan_misses() const { return shape_plan_misses_; }
  size_t shape_plans_cached() const { return variants_.size(); }
  // Over every graph of the process, for the loader's report.
  static uint64_t total_shape_plan_hits();
  static uint64_t total_shape_plan_misses();
  // resize_in_place_enabled() (ET_CPU_RESIZE_IN_PLACE, read at init; on unless "0"): a graph with symbolic dimensions
  // whose kernels are all resizable (BoundKernel::resizable; no delegate state, no permute read
  // in place) takes a new size in place instead of compiling a shape plan: its tensors take the
  // concrete sizes (the arena, planned for the upper bounds with the same in-place decisions,
  // holds every smaller size), its symbolic int arguments are evaluated again, and its
  // providers' sessions prepare their plans again (ProviderSession::resize). A session that
  // cannot turns it off for the graph (back to the bounds, then shape plans as before).
  bool resizes_in_place() const { return resize_in_place_; }
  // How many times it changed size in place.
  size_t resizes() const { return resizes_; }

  // The validated description the graph was compiled from. A graph that resizes in place keeps
  // its values' `shape` and `nbytes` at the current size (the last call's); their `dim_max`
  // stays the recorded upper size, what a caller's buffers must hold.
  const GraphSpec& spec() const { return spec_; }
  // Bytes of the intermediate-tensor arena (after lifetime-based reuse).
  size_t arena_bytes() const { return arena_bytes_; }
  // Bytes of the delegate's state (mutated buffers it owns: KV caches), this instance's own.
  size_t state_bytes() const { return state_bytes_; }
  // How many states are updated in place (only the written rows), not copied back after a call.
  size_t states_in_place() const;
  // Bytes the intermediates would take without reuse (same alignment), for the planner's saving.
  size_t unplanned_bytes() const { return unplanned_bytes_; }
  size_t num_ops() const { return ops_.size(); }
  // How many ops a non-Reference provider took.
  size_t num_ops_on_other_providers() const;
  // How many ops a provider fused into the op before them (they do not run on their own).
  size_t num_fused_ops() const;
  // Bytes providers hold for this graph beside the arena (reordered weights, scratchpads).
  size_t provider_bytes() const;
  // One line per op: where it runs and, for a declined op, why ("op kernel: Provider ...").
  std::string placement() const;
  // How many ops after an op a provider may fuse at most (one profiling event covers them all).
  static size_t max_fused_steps();

  CompiledGraph(const CompiledGraph&) = delete;
  CompiledGraph& operator=(const CompiledGraph&) = delete;
  ~CompiledGraph();

 private:
  CompiledGraph() = default;

  // Compiles `spec` (validated); with `base`, constants come from `base` (same values) and the
  // arena is `base`'s when it is large enough.
  static executorch::runtime::Error compile_spec(GraphSpec spec,
                                                 const executorch::runtime::NamedDataMap* constants,
                                                 CompiledGraph* base,
                                                 std::unique_ptr<CompiledGraph>* out);
  // What variants_ holds: shape plans by symbol values.
  using ShapePlans = std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<CompiledGraph>>>;
  // The cached shape plan of `symbols`, or variants_.end().
  ShapePlans::iterator find_shape_plan(const std::vector<int64_t>& symbols);
  // Runs the shape plan of `symbols`: `found` (find_shape_plan's), or compiled now when that is
  // variants_.end().
  executorch::runtime::Error run_shape_plan(
      const std::vector<int64_t>& symbols, ShapePlans::iterator found,
      executorch::runtime::Span<executorch::runtime::EValue*> args,
      executorch::runtime::MemoryAllocator* temp_allocator,
      executorch::runtime::EventTracer* tracer);
  // Whether a provider session says a shape plan of its own runs the current sizes faster.
  bool faster_as_shape_plan() const;
  // Whether a provider session's plans stand in at the current sizes (plans_stand_in).
  bool plans_stand_in() const;
  // At the current sizes: the sessions whose plans stand in prepare the ones they keep.
  executorch::runtime::Error prepare_standing_in();
  // execute() of a graph with symbolic dimensions: picks (or compiles) the graph for the inputs'
  // sizes and resizes the outputs to them. Looks the shape plans up once per call.
  executorch::runtime::Error execute_dynamic(
      executorch::runtime::Span<executorch::runtime::EValue*> args,
      executorch::runtime::MemoryAllocator* temp_allocator,
      executorch::runtime::EventTracer* tracer);
  // Whether every kernel can take new sizes in place (see resizes_in_place).
  bool can_resize_in_place() const;
  // The graph's tensors, symbolic arguments and provider plans at `symbols` (in place).
  executorch::runtime::Error resize_to(const std::vector<int64_t>& symbols);
  executorch::runtime::Error run(executorch::runtime::Span<executorch::runtime::EValue*> args,
                                 executorch::runtime::MemoryAllocator* temp_allocator,
                                 executorch::runtime::EventTracer* tracer);

  struct Tensor {
    std::vector<executorch::aten::SizesType> sizes;
    std::vector<executorch::aten::DimOrderType> dim_order;
    std::vector<executorch::aten::StridesType> strides;
    std::unique_ptr<executorch::aten::TensorImpl> impl;
    executorch::runtime::EValue evalue;
  };

  struct Op {
    std::vector<executorch::runtime::EValue*> args;
    std::unique_ptr<BoundKernel> kernel;  // null when fused into an earlier op
    const KernelProvider* provider = nullptr;
    std::string placement;
    // The profiling event of a kernel call: "node + fused node ... (Provider)", the same string
    // the AOT side keys the delegate's debug-handle map with (backends/cpu/profiling_events.py).
    std::string event_name;
    // ET_CPU_PROFILE: clock ticks (executorch's PAL clock) spent in the kernel over `runs`
    // executions; the first one's apart in `first_ticks` (cold caches and lazily built kernels
    // would otherwise inflate the mean of the graph's first ops).
    uint64_t ticks = 0;
    uint64_t first_ticks = 0;
    uint64_t runs = 0;
    // The latest call's clock ticks, logged to the event tracer once the graph has run.
    et_timestamp_t last_start = 0;
    et_timestamp_t last_end = 0;
    // ET_CPU_PROFILE: clock ticks its provider's `bind` took (primitive creation, weight
    // reorders), over the base graph and every graph compiled for a size (`sizes_compiled_`).
    uint64_t bind_ticks = 0;
    // A view (view_copy, squeeze/unsqueeze copies) whose output shares its input's arena bytes
    // (plan_arena): bound like any op, never run.
    bool alias = false;
  };
  // ET_CPU_PROFILE: where compiling a graph for a new size goes (summed over those compiles).
  struct CompileTicks {
    uint64_t specialize = 0;  // the spec rewritten for the size (dynamic_shapes.h)
    uint64_t tensors = 0;     // build_tensors
    uint64_t bind = 0;        // bind_ops: the providers' plans
    uint64_t arena = 0;       // plan_arena
    uint64_t finalize = 0;    // finalize_sessions: layouts settled
    uint64_t total() const { return specialize + tensors + bind + arena + finalize; }
    CompileTicks& operator+=(const CompileTicks& other) {
      specialize += other.specialize;
      tensors += other.tensors;
      bind += other.bind;
      arena += other.arena;
      finalize += other.finalize;
      return *this;
    }
  };
  // ET_CPU_PROFILE: where a call's time goes besides its kernels, summed over the calls after the
  // first: from entry to the first kernel (argument checks, binding the caller's buffers),
  // between kernels (the runtime's loop), after the last kernel (state writes, output copies).
  struct CallTicks {
    uint64_t calls = 0;  // every call, the first included
    uint64_t total = 0;
    uint64_t kernels = 0;
    uint64_t entry = 0;
    uint64_t between = 0;
    uint64_t exit = 0;
  };
  // The per-op profile table (ET_CPU_PROFILE=1), printed when the graph is destroyed.
  std::string profile_report() const;
  // Its per-call line: the delegate's time per call, and how much of it is not in kernels.
  std::string call_report() const;
  // Its compile lines: the stages of init's compile and of a compile for a new size, and the
  // costliest binds.
  std::string compile_report() const;
  // Whether op `op` is a view (same bytes under another shape) that runs on its own on the
  // Reference provider, and its input and output values.
  bool view_operands(size_t op, int32_t* input, int32_t* output) const;
  // After binding: names each kernel call's profiling event from the nodes it covers.
  void name_profiling_events();

  // An op that may ride along with the op before it (see FusableStep).
  struct FusionCandidate {
    FusableStep::Kind kind;
    double min = 0.0;
    double max = 0.0;
    int32_t residual = -1;  // kAdd, kBroadcastMul: value id of the other operand
    int32_t output = -1;    // value id the step writes
    int32_t op = -1;        // index of the step's op
    FusableStep::Eltwise eltwise = FusableStep::Eltwise::kSigmoid;  // kEltwise
    double alpha = 0.0;                                             // kEltwise
  };

  // Per value: how many times ops other than its producer read it (an op reading it twice
  // counts twice) and, if `last_reader` is given, the last op that does (-1: none).
  void count_readers(std::vector<int>* reads, std::vector<int64_t>* last_reader) const;
  void find_fusion_candidates();
  // Permutes whose output reaches a single bmm / mm operand through views only: the product is
  // offered the permute's input with the permuted strides (StridedOperand), and a permute whose
  // reader takes it never runs (plan_arena aliases its output to its input, like a view).
  void find_strided_operands();
  // A permute whose output only another permute reads: the second reads the first's input with
  // the composed dims (its spec is rewritten), the first never runs (aliased in plan_arena).
  void compose_permutes();

  executorch::runtime::Error build_tensors(const executorch::runtime::NamedDataMap* constants);
  executorch::runtime::Error bind_ops();
  // After binding: lays out the intermediates the kernels actually write and points them there.
  executorch::runtime::Error plan_arena();
  // plan_arena's step for fused residual adds (BoundKernel::adds_in_place): an op's result takes
  // its residual's slot when nothing reads the residual after the add (no copy of it into the
  // output before the product adds into it). `planned` and `root_of` are plan_arena's; updates
  // `alias_of` and `last_use` (the residual's slot lives until the result's last reader).
  void alias_fused_adds(const std::function<bool(size_t)>& planned,
                        const std::function<size_t(size_t)>& root_of,
                        std::vector<int64_t>* alias_of, std::vector<size_t>* last_use);
  executorch::runtime::Error finalize_sessions();
  executorch::runtime::EValue* build_arg(const ArgValue& arg);
  executorch::runtime::Error check_io(const executorch::runtime::EValue* given, int32_t value,
                                      const char* role, size_t position) const;

  GraphSpec spec_;
  std::vector<Tensor> tensors_;  // one per value, never resized after build_tensors
  std::vector<Op> ops_;
  bool profile_ = false;  // ET_CPU_PROFILE=1: time every kernel call (read at compile)
  CallTicks call_ticks_;  // ET_CPU_PROFILE: every run of this graph and its sizes' (base only)
  // True while a thread is in execute(): a second thread's call is refused, never interleaved.
  std::atomic<bool> executing_{false};
  CompileTicks compile_ticks_;        // this graph's own compile
  CompileTicks size_compile_ticks_;   // every graph compiled for a size (base graph only)
  size_t sizes_compiled_ = 0;
  std::vector<std::vector<FusionCandidate>> fusable_;  // per op, offered to its provider
  std::vector<size_t> fused_steps_;                    // per op, how many of them it took
  std::vector<std::vector<StridedOperand>> strided_offers_;  // per op (find_strided_operands)
  std::vector<std::vector<int32_t>> strided_permutes_;       // per op: the permute of each offer
  std::vector<int64_t> folded_into_;  // per op: a permute's reader that took it, else -1
  std::vector<int64_t> composed_into_;  // per op: the permute that composed this one, else -1
  std::vector<std::unique_ptr<ProviderSession>> sessions_;  // per provider id, opened lazily
  std::vector<ProviderSession*> session_by_id_;

  // Stable storage for kernel arguments (deques never move their elements).
  executorch::runtime::EValue none_;
  std::deque<executorch::runtime::EValue> scalars_;
  std::deque<std::vector<executorch::runtime::EValue*>> list_items_;
  std::deque<std::vector<executorch::aten::Tensor>> tensor_lists_;
  std::deque<std::vector<std::optional<executorch::aten::Tensor>>> optional_lists_;
  std::deque<std::vector<int64_t>> int_lists_;
  std::deque<std::vector<double>> double_lists_;
  std::deque<std::unique_ptr<bool[]>> bool_lists_;
  std::deque<std::vector<executorch::runtime::EValue*>> step_args_;  // FusableStep::args
  std::deque<std::string> strings_;
  std::deque<executorch::runtime::BoxedEvalueList<executorch::aten::Tensor>> boxed_tensors_;
  std::deque<executorch::runtime::BoxedEvalueList<std::optional<executorch::aten::Tensor>>>
      boxed_optionals_;
  std::deque<executorch::runtime::BoxedEvalueList<int64_t>> boxed_ints_;
  std::deque<executorch::aten::ArrayRef<double>> double_refs_;
  std::deque<executorch::aten::ArrayRef<bool>> bool_refs_;
  std::deque<executorch::aten::ArrayRef<char>> string_refs_;
  // EValues wrapping the boxed lists: declared last so they are destroyed first (an EValue's
  // destructor touches its boxed list).
  std::deque<executorch::runtime::EValue> list_evalues_;

  // Delegate state (ValueKind::State): storage owned by the base graph (a specialization uses
  // its base's), initialized from the named data map at compile, kept across calls. Each state
  // is either updated in place by its update's op, or its update is copied into it after the
  // last op of every call.
  struct StateWrite {
    int32_t state = -1;
    int32_t update = -1;
    bool in_place = false;
  };
  struct FreeDeleter {
    void operator()(uint8_t* bytes) const { std::free(bytes); }
  };
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> state_storage_;
  std::vector<StateWrite> state_writes_;
  size_t state_bytes_ = 0;
  // Decides which state updates run in place (plan_arena): sets `alias_of` for the views of the
  // states and the in-place results, and binds their in-place kernels.
  void plan_states(const std::vector<size_t>& reads_until, std::vector<int64_t>* alias_of);
  // The named data a constant or state (`what`) is stored as, checked to hold its bytes.
  executorch::runtime::Result<executorch::runtime::FreeableBuffer> stored_bytes(
      const executorch::runtime::NamedDataMap* constants, const ValueSpec& value,
      const char* what);
  // Allocates a state's storage and copies its initial bytes from the named data map.
  executorch::runtime::Error init_state(const executorch::runtime::NamedDataMap* constants,
                                        const ValueSpec& value, void** data);
  std::vector<executorch::runtime::FreeableBuffer> constant_buffers_;
  std::vector<std::unique_ptr<uint8_t[]>> constant_copies_;  // realigned constants
  std::vector<size_t> slot_offsets_;  // arena offset per value, SIZE_MAX when not in the arena
  uint8_t* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  size_t unplanned_bytes_ = 0;
  bool owns_arena_ = true;
  CompiledGraph* base_ = nullptr;  // a specialization of `base_` (shares its constants)
  // Specializations by symbol values, most recently used first (execute_dynamic).
  ShapePlans variants_;
  size_t max_variants_ = 8;
  size_t shape_plan_hits_ = 0;
  size_t shape_plan_misses_ = 0;
  // Resizing in place (resizes_in_place): the int arguments with symbolic values (an Int, or
  // one item of an int list), evaluated again at each resize.
  struct SymbolicArg {
    executorch::runtime::EValue* value = nullptr;
    SymExprSpec expr;
  };
  std::vector<SymbolicArg> symbolic_args_;
  bool resize_in_place_ = false;
  std::vector<int64_t> current_symbols_;  // the sizes the tensors and plans are at
  // Calls in a row run in place at current_symbols_ (a call again at them may take a shape plan
  // of its own instead: ProviderSession::faster_as_shape_plan).
  size_t calls_in_place_ = 0;
  size_t resizes_ = 0;
  uint64_t resize_ticks_ = 0;  // over every resize (ET_CPU_PROFILE's report)
  // A size called again in a row after plans stood in: prepare_standing_in calls, their ticks.
  size_t stand_in_prepares_ = 0;
  uint64_t stand_in_ticks_ = 0;
  // Outputs served by copying (a value listed twice, or an output that is not an Output value).
  std::vector<bool> output_is_copy_;
};

}  // namespace cpu
}  // namespace et_cpu_plugin
