#include "backends/cpu/runtime/compiled_graph.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <unordered_set>

#include <executorch/runtime/core/event_tracer_hooks_delegate.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/platform/clock.h>
#include <executorch/runtime/platform/log.h>
#include <executorch/runtime/platform/platform.h>

#include "backends/cpu/runtime/dynamic_shapes.h"
#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/memory_planner.h"
#include "backends/cpu/runtime/reference_provider.h"
#include "backends/cpu/runtime/state_kernels.h"
#include "backends/cpu/runtime/switches.h"
#include "backends/cpu/serialization/schema_generated.h"

namespace et_cpu_plugin {
namespace cpu {

using executorch::aten::ArrayRef;
using executorch::aten::ScalarType;
using executorch::aten::TensorImpl;
using executorch::runtime::BoxedEvalueList;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::NamedDataMap;
using executorch::runtime::Result;
using executorch::runtime::Span;

namespace {

#ifndef ET_CPU_MAX_ARENA_BYTES
#define ET_CPU_MAX_ARENA_BYTES (size_t{1} << 35)
#endif
constexpr size_t kMaxArenaBytes = ET_CPU_MAX_ARENA_BYTES;
// Steps offered after an op at most: an inverted residual block after its expand convolution
// is clamp, depthwise, clamp, project, add.
constexpr size_t kMaxFusedSteps = 6;
// Cache-line alignment for arena slots and realigned constants (kernels may vectorize).
constexpr size_t kAlignment = 64;

// The delegate debug id of an event identified by its name: ETDump takes a name or an integer
// id, not both.
constexpr auto kNamedEvent =
    static_cast<executorch::runtime::DebugHandle>(executorch::runtime::kUnsetDelegateDebugIntId);

// Shape plans (specializations of graphs with symbolic dimensions) found and compiled.
std::atomic<uint64_t> total_hits{0};
std::atomic<uint64_t> total_misses{0};

// Storage for empty tensors, which must still have a non-null data pointer.
alignas(kAlignment) uint8_t kEmptyStorage[kAlignment];

std::string shape_string(ArrayRef<executorch::aten::SizesType> sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return text + "]";
}

std::string shape_string(const std::vector<int64_t>& sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return text + "]";
}

const char* dtype_name(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::Byte:
      return "uint8";
    case ScalarType::Char:
      return "int8";
    case ScalarType::Short:
      return "int16";
    case ScalarType::Int:
      return "int32";
    case ScalarType::Long:
      return "int64";
    case ScalarType::Float:
      return "float32";
    case ScalarType::Bool:
      return "bool";
    case ScalarType::Double:
      return "float64";
    case ScalarType::Half:
      return "float16";
    case ScalarType::BFloat16:
      return "bfloat16";
    default:
      return "another dtype";
  }
}

}  // namespace

uint64_t CompiledGraph::total_shape_plan_hits() { return total_hits.load(); }
uint64_t CompiledGraph::total_shape_plan_misses() { return total_misses.load(); }

CompiledGraph::~CompiledGraph() {
  if (profile_ && base_ == nullptr) {
    // stderr, not ET_LOG: the table is for a person tuning a model, even in a release build.
    std::fputs(profile_report().c_str(), stderr);
  }
  if (owns_arena_) std::free(arena_);
}

std::string CompiledGraph::profile_report() const {
  uint64_t runs = 0;
  for (const Op& op : ops_) runs = std::max(runs, op.runs);
  if (runs == 0) return "CpuBackend profile: the graph never ran\n";
  // The mean is over the calls after the first; a graph that ran once has only its first.
  const bool first_only = runs == 1;
  const auto nanoseconds_of = [first_only](const Op& op) {
    return executorch::runtime::ticks_to_ns(first_only ? op.first_ticks : op.ticks);
  };
  uint64_t total = 0;
  uint64_t first_total = 0;
  for (const Op& op : ops_) {
    total += nanoseconds_of(op);
    first_total += executorch::runtime::ticks_to_ns(op.first_ticks);
  }
  const double counted = static_cast<double>(first_only ? 1 : runs - 1);
  std::string text = "CpuBackend profile (ET_CPU_PROFILE): " + std::to_string(runs) +
                     (first_only ? " runs, the first call's us"
                                 : " runs, mean us per run after the first") +
                     ", share of kernel time; fused ops run with the op before them\n";
  char line[96];
  for (const Op& op : ops_) {
    if (op.kernel == nullptr) continue;
    const double nanoseconds = static_cast<double>(nanoseconds_of(op));
    const double mean_us = nanoseconds / 1e3 / counted;
    const double share = total == 0 ? 0.0 : 100.0 * nanoseconds / static_cast<double>(total);
    std::snprintf(line, sizeof(line), "%10.1f us %5.1f%%  ", mean_us, share);
    text += line + op.placement + "\n";
  }
  const double total_us = static_cast<double>(total) / 1e3 / counted;
  std::snprintf(line, sizeof(line), "%10.1f us total\n", total_us);
  text += line;
  if (!first_only) {
    std::snprintf(line, sizeof(line), "%10.1f us the first call (cold), not in the mean\n",
                  static_cast<double>(first_total) / 1e3);
    text += line;
  }
  text += call_report();
  text += compile_report();
  if (spec_.is_dynamic()) {
    text += "shape plans: " + std::to_string(shape_plan_hits_) + " hits, " +
            std::to_string(shape_plan_misses_) + " misses (compiled for a new size), " +
            std::to_string(variants_.size()) + " cached of at most " +
            std::to_string(max_variants_) + "\n";
  }
  return text;
}

std::string CompiledGraph::call_report() const {
  const CallTicks& sum = call_ticks_;
  if (sum.calls < 2) return "";
  const double per = static_cast<double>(sum.calls - 1);
  const auto us = [per](uint64_t ticks) {
    return static_cast<double>(executorch::runtime::ticks_to_ns(ticks)) / 1e3 / per;
  };
  char line[240];
  std::snprintf(line, sizeof(line),
                "%10.1f us per call in the delegate (mean after the first): kernels %.1f, "
                "outside them %.1f (entry %.1f, between kernels %.1f, exit %.1f)\n",
                us(sum.total), us(sum.kernels), us(sum.total - sum.kernels), us(sum.entry),
                us(sum.between), us(sum.exit));
  return line;
}

std::string CompiledGraph::compile_report() const {
  const auto us = [](uint64_t ticks) {
    return static_cast<double>(executorch::runtime::ticks_to_ns(ticks)) / 1e3;
  };
  const auto stages = [&us](const CompileTicks& t, double per) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "%.0f us (specialize %.0f, tensors %.0f, bind %.0f, arena %.0f, finalize %.0f)",
                  us(t.total()) / per,
                  us(t.specialize) / per, us(t.tensors) / per, us(t.bind) / per, us(t.arena) / per,
                  us(t.finalize) / per);
    return std::string(line);
  };
  std::string text = "compile (init): " + stages(compile_ticks_, 1.0) + "\n";
  if (resizes_ > 0) {
    char line[120];
    std::snprintf(line, sizeof(line), "resized in place %zu times: %.0f us each (mean)\n",
                  resizes_, us(resize_ticks_) / static_cast<double>(resizes_));
    text += line;
  }
  if (stand_in_prepares_ > 0) {
    char line[120];
    std::snprintf(line, sizeof(line), "stand-ins prepared again %zu times: %.0f us each\n",
                  stand_in_prepares_,
                  us(stand_in_ticks_) / static_cast<double>(stand_in_prepares_));
    text += line;
  }
  if (sizes_compiled_ == 0) return text;
  const double per = static_cast<double>(sizes_compiled_);
  text += "compile for a new size, mean of " + std::to_string(sizes_compiled_) + ": " +
          stages(size_compile_ticks_, per) + "\n";
  // The binds that make up most of it, costliest first: what a faster re-plan has to cut.
  std::vector<const Op*> by_cost;
  for (const Op& op : ops_) {
    if (op.kernel != nullptr) by_cost.push_back(&op);
  }
  std::sort(by_cost.begin(), by_cost.end(),
            [](const Op* a, const Op* b) { return a->bind_ticks > b->bind_ticks; });
  const double all = per + 1.0;  // the init compile and every size's
  char line[96];
  for (size_t k = 0; k < by_cost.size() && k < 8; ++k) {
    std::snprintf(line, sizeof(line), "%10.1f us bind (mean of %zu compiles)  ",
                  us(by_cost[k]->bind_ticks) / all, sizes_compiled_ + 1);
    text += line + by_cost[k]->placement + "\n";
  }
  return text;
}

size_t CompiledGraph::max_fused_steps() { return kMaxFusedSteps; }

void CompiledGraph::name_profiling_events() {
  for (size_t i = 0; i < ops_.size(); ++i) {
    Op& op = ops_[i];
    if (op.kernel == nullptr) continue;  // runs inside the op that fused it
    std::string name = spec_.ops[i].name;
    for (size_t f = 1; f <= fused_steps_[i]; ++f) name += " + " + spec_.ops[i + f].name;
    // The schema's provider names: the AOT side knows them too (a declined op runs on Reference).
    const uint8_t id = spec_.ops[i].provider;
    std::string provider = op.provider == &reference_provider()
                               ? "Reference"
                               : fb::EnumNameProvider(static_cast<fb::Provider>(id));
    if (provider.empty()) provider = "provider " + std::to_string(id);
    op.event_name = name + " (" + provider + ")";
  }
}

Error CompiledGraph::compile(const void* data, size_t size, const NamedDataMap* constants,
                             std::unique_ptr<CompiledGraph>* out) {
  GraphSpec spec;
  Error error = read_payload(data, size, &spec);
  if (error != Error::Ok) return error;
  // ET_CPU_REFERENCE_ONLY=1 (set, not 0): every op on ExecuTorch's kernels, as if lowered with
  // every route on Reference (the AOT side's only difference), so a test compares providers on
  // one .pte.
  if (kernel_opted_in("ET_CPU_REFERENCE_ONLY")) {
    for (OpSpec& op : spec.ops) op.provider = kReferenceProviderId;
  }
  return compile_spec(std::move(spec), constants, nullptr, out);
}

Error CompiledGraph::compile_spec(GraphSpec spec, const NamedDataMap* constants,
                                  CompiledGraph* base, std::unique_ptr<CompiledGraph>* out) {
  std::unique_ptr<CompiledGraph> graph(new CompiledGraph());
  graph->spec_ = std::move(spec);
  graph->base_ = base;
  graph->max_variants_ = static_cast<size_t>(switch_number(
      "ET_CPU_SHAPE_PLANS", static_cast<int64_t>(graph->max_variants_), 1, 1024));
  Error error = Error::Ok;
  // Five clock reads per compile: cheap enough to take always, printed with ET_CPU_PROFILE.
  CompileTicks& ticks = graph->compile_ticks_;
  et_timestamp_t mark = executorch::runtime::pal_current_ticks();
  const auto lap = [&mark](uint64_t* into) {
    const et_timestamp_t now = executorch::runtime::pal_current_ticks();
    *into += now - mark;
    mark = now;
  };
  if (base == nullptr && graph->spec_.is_dynamic()) {
    graph->resize_in_place_ = resize_in_place_enabled();
  }
  graph->compose_permutes();
  graph->find_fusion_candidates();
  if (error == Error::Ok) error = graph->build_tensors(constants);
  if (error == Error::Ok) graph->find_strided_operands();  // (points at tensors_)
  lap(&ticks.tensors);
  if (error == Error::Ok) error = graph->bind_ops();
  lap(&ticks.bind);
  if (error == Error::Ok) error = graph->plan_arena();
  lap(&ticks.arena);
  if (error == Error::Ok) error = graph->finalize_sessions();
  lap(&ticks.finalize);
  if (error != Error::Ok) return error;
  if (graph->resize_in_place_) {
    graph->resize_in_place_ = graph->can_resize_in_place();
    graph->current_symbols_ = upper_bounds(graph->spec_);
  }
  graph->name_profiling_events();
  // A specialization's kernel times add up in its base's ops (the base prints the table).
  graph->profile_ = base != nullptr ? base->profile_ : kernel_opted_in("ET_CPU_PROFILE");
  *out = std::move(graph);
  return Error::Ok;
}

Error CompiledGraph::plan_arena() {
  // Only intermediates live in the arena; inputs and outputs are the caller's memory, constants
  // the program's.
  // An intermediate listed as a graph output is copied out after the last op: it stays alive
  // to the end.
  std::vector<bool> copied_out(spec_.values.size(), false);
  for (int32_t id : spec_.outputs) copied_out[id] = true;
  // A state's update is read after the last op too (copied into the state), unless in place.
  for (const ValueSpec& value : spec_.values) {
    if (value.kind == ValueKind::State) copied_out[value.state_update] = true;
  }
  // An op that took fused steps writes only the last step's result, when the op runs: that
  // result must not share bytes with anything alive from then on (e.g. the op's own input). The
  // op's own result and the earlier steps' results are never written: no bytes at all.
  std::vector<int64_t> first_write(spec_.values.size(), -1);
  std::vector<bool> skipped(spec_.values.size(), false);
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    const int64_t producer = spec_.values[i].producer;
    first_write[i] = producer;
    skipped[i] = producer >= 0 && fused_steps_[static_cast<size_t>(producer)] > 0;
  }
  for (size_t op = 0; op < fused_steps_.size(); ++op) {
    const size_t taken = fused_steps_[op];
    if (taken == 0) continue;
    for (size_t s = 0; s + 1 < taken; ++s) skipped[fusable_[op][s].output] = true;
    first_write[fusable_[op][taken - 1].output] = static_cast<int64_t>(op);
  }
  // Up to which op each value is read (the op count: after the last op).
  std::vector<size_t> reads_until(spec_.values.size(), 0);
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    const int64_t use = spec_.values[i].last_use;
    reads_until[i] = copied_out[i] ? spec_.ops.size() : use < 0 ? 0 : static_cast<size_t>(use);
  }
  // Views of the states alias them; updates that can run in place alias their state.
  std::vector<int64_t> alias_of(spec_.values.size(), -1);
  plan_states(reads_until, &alias_of);
  const auto planned = [&](size_t i) {
    const ValueSpec& value = spec_.values[i];
    return value.kind == ValueKind::Intermediate && value.producer >= 0 && value.nbytes > 0 &&
           !skipped[i];
  };
  const auto root_of = [&alias_of](size_t i) {
    while (alias_of[i] >= 0) i = static_cast<size_t>(alias_of[i]);
    return i;
  };
  std::vector<size_t> last_use(spec_.values.size(), 0);
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    if (planned(i)) {
      // (A value nobody reads has last_use -1: as SIZE_MAX it stays alive to the end.)
      last_use[i] = std::max(copied_out[i] ? spec_.ops.size()
                                           : static_cast<size_t>(spec_.values[i].last_use),
                             static_cast<size_t>(first_write[i]));
    }
  }
  // A view of an arena intermediate is the same bytes under another shape: its output takes
  // the input's slot (which then lives until the last reader of either) and the op never runs.
  // ViT's 97 view_copy ops were 5.7% of its kernel time as copies.
  // A view of an updated state (its in-place result) reads the state's final bytes: alias too.
  for (size_t op = 0; op < spec_.ops.size(); ++op) {
    int32_t input = -1;
    int32_t output = -1;
    if (ops_[op].alias || !view_operands(op, &input, &output) ||
        !planned(static_cast<size_t>(output)) || alias_of[static_cast<size_t>(output)] >= 0) {
      continue;
    }
    const size_t root = root_of(static_cast<size_t>(input));
    const bool state_root = spec_.values[root].kind == ValueKind::State;
    if (state_root) {
      // Only after the state's in-place update: from then on its bytes are final.
      const auto write = std::find_if(state_writes_.begin(), state_writes_.end(),
                                      [root](const StateWrite& w) {
                                        return w.state == static_cast<int32_t>(root);
                                      });
      if (write == state_writes_.end() || !write->in_place ||
          static_cast<int64_t>(op) <= spec_.values[write->update].producer) {
        continue;
      }
    } else if (!planned(static_cast<size_t>(input))) {
      continue;
    }
    alias_of[static_cast<size_t>(output)] = static_cast<int64_t>(root);
    if (!state_root) {
      last_use[root] = std::max(last_use[root], last_use[static_cast<size_t>(output)]);
    }
    ops_[op].alias = true;
    if (composed_into_[op] >= 0) {
      const size_t into = static_cast<size_t>(composed_into_[op]);
      ops_[op].placement = spec_.ops[op].name + " " + spec_.ops[op].kernel +
                           ": folded into " + spec_.ops[into].name +
                           " (which permutes this permute's input by the composed dims)";
    } else if (folded_into_[op] < 0) {
      ops_[op].placement += " (aliases its input: no copy)";
    }
  }
  for (size_t op = 0; op < spec_.ops.size(); ++op) {
    if ((folded_into_[op] >= 0 || composed_into_[op] >= 0) && !ops_[op].alias) {
      return report_error(Error::Internal,
                          "op %zu (%s): permute folded into a product but its output is not "
                          "its input's bytes",
                          op, spec_.ops[op].name.c_str());
    }
  }
  alias_fused_adds(planned, root_of, &alias_of, &last_use);
  std::vector<BufferRequest> requests;
  std::vector<size_t> owners;
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    const ValueSpec& value = spec_.values[i];
    if (planned(i) && alias_of[i] < 0) {
      requests.push_back(
          BufferRequest{value.nbytes, static_cast<size_t>(first_write[i]), last_use[i]});
      owners.push_back(i);
      unplanned_bytes_ += (value.nbytes + kAlignment - 1) / kAlignment * kAlignment;
    }
  }
  MemoryPlan plan = plan_memory(requests, kAlignment);
  if (plan.arena_bytes > kMaxArenaBytes) {
    return report_error(Error::MemoryAllocationFailed,
                        "intermediate arena of %zu bytes exceeds the limit of %zu bytes",
                        plan.arena_bytes, kMaxArenaBytes);
  }
  arena_bytes_ = plan.arena_bytes;
  if (base_ != nullptr && arena_bytes_ <= base_->arena_bytes_) {
    // A specialization runs only inside its base's execute: the base's arena, planned for the
    // upper bounds, is free then.
    arena_ = base_->arena_;
    owns_arena_ = false;
  } else if (arena_bytes_ > 0) {
    arena_ = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, arena_bytes_));
    if (arena_ == nullptr) {
      return report_error(Error::MemoryAllocationFailed,
                          "cannot allocate the %zu-byte intermediate arena", arena_bytes_);
    }
  }
  // Point each planned intermediate at its slot (the others keep the empty placeholder).
  slot_offsets_.assign(spec_.values.size(), SIZE_MAX);
  for (size_t r = 0; r < requests.size(); ++r) {
    slot_offsets_[owners[r]] = plan.offsets[r];
    tensors_[owners[r]].impl->set_data(arena_ + plan.offsets[r]);
  }
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    if (alias_of[i] < 0) continue;
    const size_t root = static_cast<size_t>(alias_of[i]);
    slot_offsets_[i] = slot_offsets_[root];
    tensors_[i].impl->set_data(tensors_[root].impl->mutable_data());
  }
  return Error::Ok;
}

void CompiledGraph::alias_fused_adds(const std::function<bool(size_t)>& planned,
                                     const std::function<size_t(size_t)>& root_of,
                                     std::vector<int64_t>* alias_of,
                                     std::vector<size_t>* last_use) {
  // ET_CPU_ADD_IN_PLACE=0: every fused add's result in a slot of its own (for measuring).
  if (!kernel_switched_on("ET_CPU_ADD_IN_PLACE")) return;
  std::vector<int64_t>& alias = *alias_of;
  std::vector<size_t>& until = *last_use;
  for (size_t op = 0; op < fused_steps_.size(); ++op) {
    const size_t taken = fused_steps_[op];
    if (taken == 0 || ops_[op].kernel == nullptr || !ops_[op].kernel->adds_in_place()) continue;
    // One add among the taken steps, and only elementwise steps after it (the shape is kept).
    size_t add = taken;
    size_t adds = 0;
    bool shape_kept = true;
    for (size_t s = 0; s < taken; ++s) {
      const FusableStep::Kind kind = fusable_[op][s].kind;
      if (kind == FusableStep::Kind::kAdd) {
        add = s;
        ++adds;
      } else if (adds > 0 && kind != FusableStep::Kind::kRelu &&
                 kind != FusableStep::Kind::kClamp && kind != FusableStep::Kind::kEltwise) {
        shape_kept = false;
      }
    }
    if (adds != 1 || !shape_kept) continue;
    const int32_t residual = fusable_[op][add].residual;
    const size_t result = static_cast<size_t>(fusable_[op][taken - 1].output);
    if (residual < 0 || !planned(static_cast<size_t>(residual)) || !planned(result) ||
        alias[result] >= 0) {
      continue;
    }
    const size_t root = root_of(static_cast<size_t>(residual));
    const ValueSpec& kept = spec_.values[root];
    if (kept.kind != ValueKind::Intermediate || !planned(root) ||
        kept.nbytes != spec_.values[result].nbytes || kept.dtype != spec_.values[result].dtype) {
      continue;
    }
    // Nothing reads the residual's bytes after the add (its own readers and its views'), and the
    // op itself reads them only as the residual (not as its input too: x + conv(x)).
    const size_t add_op = static_cast<size_t>(fusable_[op][add].op);
    if (until[root] > add_op) continue;
    bool read_otherwise = false;
    for (size_t a = 0; a < spec_.ops[op].args.size() && !read_otherwise; ++a) {
      const ArgValue& arg = spec_.ops[op].args[a];
      const auto same = [&](int32_t id) {
        return id >= 0 && planned(static_cast<size_t>(id)) &&
               root_of(static_cast<size_t>(id)) == root;
      };
      read_otherwise = same(arg.tensor) || std::any_of(arg.tensors.begin(), arg.tensors.end(), same);
    }
    if (read_otherwise) continue;
    alias[result] = static_cast<int64_t>(root);
    until[root] = std::max(until[root], until[result]);
    ops_[op].placement += " (adds in place: writes into " + kept.name + ")";
  }
}

void CompiledGraph::plan_states(const std::vector<size_t>& reads_until,
                                std::vector<int64_t>* alias_of) {
  std::vector<int64_t>& alias = *alias_of;
  const auto root_of = [&alias](size_t i) {
    while (alias[i] >= 0) i = static_cast<size_t>(alias[i]);
    return i;
  };
  const auto is_intermediate_result = [this](size_t i) {
    const ValueSpec& value = spec_.values[i];
    return value.kind == ValueKind::Intermediate && value.producer >= 0;
  };
  // A view of a state (its value at the start of the call) is the state's bytes. It stays right
  // while the state is not written: an in-place update below requires its readers to run first.
  for (size_t op = 0; op < spec_.ops.size(); ++op) {
    int32_t input = -1;
    int32_t output = -1;
    // (Not a view read after the call: another state's update, copied after this state may
    // have been.)
    if (!view_operands(op, &input, &output) || !is_intermediate_result(output) ||
        reads_until[static_cast<size_t>(output)] >= spec_.ops.size()) {
      continue;
    }
    const size_t root = root_of(static_cast<size_t>(input));
    if (spec_.values[root].kind != ValueKind::State) continue;
    alias[static_cast<size_t>(output)] = static_cast<int64_t>(root);
    ops_[op].alias = true;
    ops_[op].placement += " (aliases the delegate's state " + spec_.values[root].name +
                          ": no copy)";
  }
  std::vector<bool> graph_output(spec_.values.size(), false);
  for (int32_t id : spec_.outputs) graph_output[id] = true;
  for (size_t s = 0; s < spec_.values.size(); ++s) {
    const ValueSpec& state = spec_.values[s];
    if (state.kind != ValueKind::State) continue;
    StateWrite write{static_cast<int32_t>(s), state.state_update, false};
    const size_t update = static_cast<size_t>(state.state_update);
    const int64_t producer = spec_.values[update].producer;
    int32_t self = -1;
    // In place only where it is provably the same: the update is computed by a row write of this
    // state (on Reference, not fused, not a view), no other argument of that op is the state or
    // one of its views, and nothing reads the state's old value (itself or through a view) after
    // that op. Otherwise the op runs as exported and its result is copied back after the call.
    bool ok = producer >= 0 && !graph_output[update] && alias[update] < 0;
    const size_t p = static_cast<size_t>(producer);
    ok = ok && ops_[p].kernel != nullptr && !ops_[p].alias && fused_steps_[p] == 0 &&
         ops_[p].provider == &reference_provider() && is_row_write(spec_, spec_.ops[p], &self) &&
         self == static_cast<int32_t>(s);
    if (ok) {
      size_t uses = 0;
      for (const ArgValue& arg : spec_.ops[p].args) {
        const auto count = [&](int32_t id) {
          if (id >= 0 && root_of(static_cast<size_t>(id)) == s) ++uses;
        };
        if (arg.type == ArgValue::Type::Tensor) count(arg.tensor);
        for (int32_t id : arg.tensors) count(id);
      }
      ok = uses == 1 && reads_until[s] <= p;
      for (size_t v = 0; ok && v < spec_.values.size(); ++v) {
        if (v != s && alias[v] >= 0 && root_of(v) == s) ok = reads_until[v] < p;
      }
    }
    if (ok) {
      std::unique_ptr<BoundKernel> kernel = make_row_write(
          spec_, spec_.ops[p], [this](int32_t id) { return &tensors_[id].evalue; });
      ok = kernel != nullptr;
      if (ok) {
        ops_[p].kernel = std::move(kernel);
        ops_[p].placement += " (in place on the delegate's state " + state.name +
                             ": writes only the indexed rows)";
        alias[update] = static_cast<int64_t>(s);
      }
    }
    if (!ok && producer >= 0) {
      ops_[p].placement += " (its result is copied into the delegate's state " + state.name +
                           " after the call)";
    }
    write.in_place = ok;
    state_writes_.push_back(write);
  }
}

size_t CompiledGraph::states_in_place() const {
  size_t count = 0;
  for (const StateWrite& write : state_writes_) count += write.in_place ? 1 : 0;
  return count;
}

bool CompiledGraph::view_operands(size_t op, int32_t* input, int32_t* output) const {
  static const char* const kViews[] = {"aten::view_copy.out", "aten::alias_copy.out",
                                       "aten::squeeze_copy.out", "aten::squeeze_copy.dim_out",
                                       "aten::squeeze_copy.dims_out", "aten::unsqueeze_copy.out"};
  const OpSpec& spec = spec_.ops[op];
  if (folded_into_[op] >= 0 || composed_into_[op] >= 0) {  // a permute its reader read through
    *input = spec.args.front().tensor;
    *output = spec.args.back().tensor;
    return true;
  }
  // On Reference only: a provider's own view kernel may convert a layout it keeps (its bytes
  // would then differ from its input's).
  if (ops_[op].kernel == nullptr || ops_[op].provider != &reference_provider() ||
      fused_steps_[op] != 0 || spec.args.size() < 2 ||
      std::none_of(std::begin(kViews), std::end(kViews),
                   [&spec](const char* view) { return spec.kernel == view; })) {
    return false;
  }
  const ArgValue& in = spec.args.front();
  const ArgValue& out = spec.args.back();
  if (in.type != ArgValue::Type::Tensor || out.type != ArgValue::Type::Tensor || in.tensor < 0 ||
      out.tensor < 0 || in.tensor == out.tensor) {
    return false;
  }
  const ValueSpec& from = spec_.values[static_cast<size_t>(in.tensor)];
  const ValueSpec& to = spec_.values[static_cast<size_t>(out.tensor)];
  if (to.producer != static_cast<int64_t>(op) || from.dtype != to.dtype ||
      from.nbytes != to.nbytes) {
    return false;
  }
  *input = in.tensor;
  *output = out.tensor;
  return true;
}

Error CompiledGraph::build_tensors(const NamedDataMap* constants) {
  tensors_.resize(spec_.values.size());
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    const ValueSpec& value = spec_.values[i];
    Tensor& tensor = tensors_[i];
    size_t rank = value.shape.size();
    tensor.sizes.assign(value.shape.begin(), value.shape.end());
    tensor.dim_order.resize(rank);
    tensor.strides.resize(rank);
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      tensor.dim_order[d] = static_cast<executorch::aten::DimOrderType>(d);
      tensor.strides[d] = static_cast<executorch::aten::StridesType>(stride);
      stride *= value.shape[d] == 0 ? 1 : value.shape[d];
    }
    // Reserve one element so data() is never null, even for rank 0.
    tensor.sizes.reserve(rank + 1);
    tensor.dim_order.reserve(rank + 1);
    tensor.strides.reserve(rank + 1);

    // Intermediates get their arena slot after binding (plan_arena).
    void* data = kEmptyStorage;
    if ((value.kind == ValueKind::Constant || value.kind == ValueKind::State) &&
        base_ != nullptr) {
      // Same payload: same values; a specialization updates its base's state.
      data = base_->tensors_[i].impl->mutable_data();
    } else if (value.kind == ValueKind::State) {
      Error error = init_state(constants, value, &data);
      if (error != Error::Ok) return error;
    } else if (value.kind == ValueKind::Constant) {
      auto buffer = stored_bytes(constants, value, "constant");
      if (!buffer.ok()) return buffer.error();
      const void* bytes = buffer->data();
      if (value.nbytes > 0 && reinterpret_cast<uintptr_t>(bytes) % alignof(int64_t) != 0) {
        // Kernels read elements in place: realign rather than risk unaligned loads.
        std::unique_ptr<uint8_t[]> copy(new (std::nothrow) uint8_t[value.nbytes]);
        if (copy == nullptr) return Error::MemoryAllocationFailed;
        std::memcpy(copy.get(), bytes, value.nbytes);
        bytes = copy.get();
        constant_copies_.push_back(std::move(copy));
      }
      if (value.nbytes > 0) data = const_cast<void*>(bytes);  // kernels never write inputs
      constant_buffers_.push_back(std::move(buffer.get()));
    }
    // Inputs and outputs get the caller's data pointer in execute().
    // Resizing in place: a symbolic value's sizes change within its bounds (resize_to).
    const auto dynamism = resize_in_place_ && value.is_dynamic()
                              ? executorch::aten::TensorShapeDynamism::DYNAMIC_BOUND
                              : executorch::aten::TensorShapeDynamism::STATIC;
    tensor.impl.reset(new TensorImpl(value.dtype, static_cast<ssize_t>(rank), tensor.sizes.data(),
                                     data, tensor.dim_order.data(), tensor.strides.data(),
                                     dynamism));
    tensor.evalue = EValue(executorch::aten::Tensor(tensor.impl.get()));
  }
  return Error::Ok;
}

Result<FreeableBuffer> CompiledGraph::stored_bytes(const NamedDataMap* constants,
                                                   const ValueSpec& value, const char* what) {
  if (constants == nullptr) {
    return report_error(Error::InvalidState,
                        "%s %s (key '%s') but the program has no named data map", what,
                        value.name.c_str(), value.constant_key.c_str());
  }
  auto buffer = constants->get_data(value.constant_key.c_str());
  if (!buffer.ok()) {
    return report_error(Error::NotFound, "%s %s: key '%s' not in the named data map", what,
                        value.name.c_str(), value.constant_key.c_str());
  }
  if (buffer->size() < value.nbytes) {
    return report_error(Error::InvalidProgram,
                        "%s %s (key '%s'): %zu bytes stored, %s %s needs %zu", what,
                        value.name.c_str(), value.constant_key.c_str(), buffer->size(),
                        dtype_name(value.dtype), shape_string(value.shape).c_str(), value.nbytes);
  }
  return std::move(buffer.get());
}

Error CompiledGraph::init_state(const NamedDataMap* constants, const ValueSpec& value,
                                void** data) {
  if (value.nbytes == 0) return Error::Ok;
  auto buffer = stored_bytes(constants, value, "state");
  if (!buffer.ok()) return buffer.error();
  const size_t rounded = (value.nbytes + kAlignment - 1) / kAlignment * kAlignment;
  std::unique_ptr<uint8_t, FreeDeleter> storage(
      static_cast<uint8_t*>(std::aligned_alloc(kAlignment, rounded)));
  if (storage == nullptr) {
    return report_error(Error::MemoryAllocationFailed, "cannot allocate the %zu-byte state %s",
                        value.nbytes, value.name.c_str());
  }
  // This delegate instance's own copy: another loaded method starts from the payload's bytes.
  std::memcpy(storage.get(), buffer->data(), value.nbytes);
  buffer->Free();
  *data = storage.get();
  state_bytes_ += value.nbytes;
  state_storage_.push_back(std::move(storage));
  return Error::Ok;
}

EValue* CompiledGraph::build_arg(const ArgValue& arg) {
  using Type = ArgValue::Type;
  switch (arg.type) {
    case Type::Tensor:
      return &tensors_[arg.tensor].evalue;
    case Type::None:
      return &none_;
    case Type::Int:
      scalars_.emplace_back(arg.int_value);
      if (!arg.int_expr.is_static()) symbolic_args_.push_back({&scalars_.back(), arg.int_expr});
      return &scalars_.back();
    case Type::Double:
      scalars_.emplace_back(arg.double_value);
      return &scalars_.back();
    case Type::Bool:
      scalars_.emplace_back(arg.bool_value);
      return &scalars_.back();
    case Type::TensorList: {
      auto& items = list_items_.emplace_back();
      auto& unwrapped = tensor_lists_.emplace_back();
      items.reserve(arg.tensors.size() + 1);  // non-null data() even when empty
      unwrapped.reserve(arg.tensors.size() + 1);
      for (int32_t id : arg.tensors) {
        items.push_back(&tensors_[id].evalue);
        unwrapped.emplace_back(tensors_[id].impl.get());
      }
      auto& boxed = boxed_tensors_.emplace_back(items.data(), unwrapped.data(),
                                                static_cast<int>(items.size()));
      list_evalues_.emplace_back(&boxed);
      return &list_evalues_.back();
    }
    case Type::OptionalTensorList: {
      auto& items = list_items_.emplace_back();
      auto& unwrapped = optional_lists_.emplace_back();
      items.reserve(arg.tensors.size() + 1);
      unwrapped.resize(arg.tensors.size() + 1);
      for (int32_t id : arg.tensors) {
        items.push_back(id < 0 ? &none_ : &tensors_[id].evalue);
      }
      auto& boxed = boxed_optionals_.emplace_back(items.data(), unwrapped.data(),
                                                  static_cast<int>(items.size()));
      list_evalues_.emplace_back(&boxed);
      return &list_evalues_.back();
    }
    case Type::IntList: {
      auto& items = list_items_.emplace_back();
      auto& unwrapped = int_lists_.emplace_back(arg.ints.size() + 1, 0);
      items.reserve(arg.ints.size() + 1);
      for (size_t e = 0; e < arg.ints.size(); ++e) {
        scalars_.emplace_back(arg.ints[e]);
        items.push_back(&scalars_.back());
        if (e < arg.int_exprs.size() && !arg.int_exprs[e].is_static()) {
          symbolic_args_.push_back({&scalars_.back(), arg.int_exprs[e]});
        }
      }
      auto& boxed = boxed_ints_.emplace_back(items.data(), unwrapped.data(),
                                             static_cast<int>(items.size()));
      scalars_.emplace_back(&boxed);
      return &scalars_.back();
    }
    case Type::DoubleList: {
      auto& values = double_lists_.emplace_back(arg.doubles);
      auto& ref = double_refs_.emplace_back(values.data(), values.size());
      scalars_.emplace_back(&ref);
      return &scalars_.back();
    }
    case Type::BoolList: {
      auto& values = bool_lists_.emplace_back(new bool[arg.bools.size() + 1]);
      for (size_t i = 0; i < arg.bools.size(); ++i) values[i] = arg.bools[i];
      auto& ref = bool_refs_.emplace_back(values.get(), arg.bools.size());
      scalars_.emplace_back(&ref);
      return &scalars_.back();
    }
    case Type::String: {
      auto& text = strings_.emplace_back(arg.string_value);
      auto& ref = string_refs_.emplace_back(text.data(), text.size());
      scalars_.emplace_back(&ref);
      return &scalars_.back();
    }
  }
  return &none_;
}


namespace {

// A scalar argument as a double; false when it is not a number.
bool scalar_value(const ArgValue& arg, double* out) {
  if (arg.type == ArgValue::Type::Double) {
    *out = arg.double_value;
    return true;
  }
  if (arg.type == ArgValue::Type::Int) {
    *out = static_cast<double>(arg.int_value);
    return true;
  }
  return false;
}

bool same_tensor_type(const ValueSpec& a, const ValueSpec& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

// Whether `small` ([N or 1, C, 1, ..., 1]) broadcasts per channel over `full` (same rank >= 3).
bool broadcasts_to(const std::vector<int64_t>& small, const std::vector<int64_t>& full) {
  if (small.size() != full.size() || full.size() < 3 || small[1] != full[1] ||
      (small[0] != full[0] && small[0] != 1)) {
    return false;
  }
  for (size_t d = 2; d < small.size(); ++d) {
    if (small[d] != 1) return false;
  }
  return true;
}

// The activation `route` computes from its arguments `a` (self first, out last), as a fusable
// elementwise step; false when it is none or its arguments do not fit one.
bool eltwise_of(const std::string& route, const std::vector<ArgValue>& a,
                FusableStep::Eltwise* kind, double* alpha) {
  using E = FusableStep::Eltwise;
  *alpha = 0.0;
  if (a.size() == 2) {
    static const std::pair<const char*, E> kUnary[] = {
        {"aten.sigmoid.default", E::kSigmoid},         {"aten.tanh.default", E::kTanh},
        {"aten.hardswish.default", E::kHardswish},     {"aten.silu.default", E::kSilu},
        {"aten.hardsigmoid.default", E::kHardsigmoid},
    };
    for (const auto& [name, value] : kUnary) {
      if (route == name) {
        *kind = value;
        return true;
      }
    }
    return false;
  }
  if (route == "aten.gelu.default" && a.size() == 3 && a[1].type == ArgValue::Type::String) {
    if (a[1].string_value != "none" && a[1].string_value != "tanh") return false;
    *kind = a[1].string_value == "none" ? E::kGelu : E::kGeluTanh;
    return true;
  }
  if (route == "aten.leaky_relu.default" && a.size() == 3) {
    *kind = E::kLeakyRelu;
    return scalar_value(a[1], alpha);
  }
  if (route == "aten.elu.default" && a.size() == 5) {
    double scale = 0.0;
    double input_scale = 0.0;
    *kind = E::kElu;
    return scalar_value(a[1], alpha) && scalar_value(a[2], &scale) &&
           scalar_value(a[3], &input_scale) && scale == 1.0 && input_scale == 1.0;
  }
  return false;
}

}  // namespace

void CompiledGraph::count_readers(std::vector<int>* reads,
                                  std::vector<int64_t>* last_reader) const {
  reads->assign(spec_.values.size(), 0);
  if (last_reader != nullptr) last_reader->assign(spec_.values.size(), -1);
  for (size_t op = 0; op < spec_.ops.size(); ++op) {
    for (const ArgValue& arg : spec_.ops[op].args) {
      auto count = [&](int32_t id) {
        if (id < 0 || spec_.values[id].producer == static_cast<int64_t>(op)) return;
        ++(*reads)[id];
        if (last_reader != nullptr) (*last_reader)[id] = static_cast<int64_t>(op);
      };
      if (arg.type == ArgValue::Type::Tensor) count(arg.tensor);
      for (int32_t id : arg.tensors) count(id);
    }
  }
}

void CompiledGraph::find_fusion_candidates() {
  const size_t num_ops = spec_.ops.size();
  const size_t num_values = spec_.values.size();
  fusable_.assign(num_ops, {});
  // Readers and outputs per value, from the ops' tensor arguments.
  std::vector<int> reads;
  std::vector<int64_t> reader;
  count_readers(&reads, &reader);
  std::vector<std::vector<int32_t>> written(num_ops);
  for (size_t v = 0; v < num_values; ++v) {
    if (spec_.values[v].producer >= 0) written[spec_.values[v].producer].push_back(v);
  }
  std::vector<bool> is_graph_output(num_values, false);
  for (int32_t id : spec_.outputs) is_graph_output[id] = true;
  // A state's update is written back after the call: it must be materialized.
  for (const ValueSpec& value : spec_.values) {
    if (value.kind == ValueKind::State) is_graph_output[value.state_update] = true;
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();

  for (size_t head = 0; head < num_ops; ++head) {
    if (spec_.ops[head].provider == kReferenceProviderId || written[head].size() != 1) continue;
    int32_t current = written[head][0];
    for (size_t k = head + 1; k < num_ops && fusable_[head].size() < kMaxFusedSteps; ++k) {
      const ValueSpec& value = spec_.values[current];
      const OpSpec& step = spec_.ops[k];
      // The result we would stop materializing must be an intermediate only this step reads.
      if (value.kind != ValueKind::Intermediate || is_graph_output[current] ||
          reads[current] != 1 || reader[current] != static_cast<int64_t>(k) ||
          written[k].size() != 1 || value.dtype != ScalarType::Float) {
        break;
      }
      const int32_t result = written[k][0];
      // Elementwise steps keep the shape; a convolution may change it.
      const bool elementwise_ok = same_tensor_type(value, spec_.values[result]);
      const std::vector<ArgValue>& a = step.args;
      auto is_current = [&](const ArgValue& arg) {
        return arg.type == ArgValue::Type::Tensor && arg.tensor == current;
      };
      FusionCandidate candidate{FusableStep::Kind::kRelu, 0.0, 0.0, -1, result,
                                static_cast<int32_t>(k)};
      if (step.route == "aten.convolution.default" && !a.empty() && is_current(a[0]) &&
          step.provider == spec_.ops[head].provider) {
        candidate.kind = FusableStep::Kind::kConv;
      } else if (!elementwise_ok && step.route == "aten.mul.Tensor" && a.size() == 3 &&
                 is_current(a[0]) != is_current(a[1])) {
        // The previous result broadcast over a ready full-size operand (x * gate; its result
        // has the operand's shape, and the steps after it are offered too: a squeeze-excite
        // binder looks at the convolution after it).
        const ArgValue& other = is_current(a[0]) ? a[1] : a[0];
        if (other.type != ArgValue::Type::Tensor) break;
        const ValueSpec& operand = spec_.values[other.tensor];
        const bool ready =
            operand.kind == ValueKind::Input || operand.kind == ValueKind::Constant ||
            (operand.producer >= 0 && operand.producer < static_cast<int64_t>(head));
        if (!ready || !same_tensor_type(operand, spec_.values[result]) ||
            !broadcasts_to(value.shape, operand.shape)) {
          break;
        }
        candidate.kind = FusableStep::Kind::kBroadcastMul;
        candidate.residual = other.tensor;
      } else if (!elementwise_ok) {
        break;
      } else if (step.route == "aten.relu.default" && a.size() == 2 && is_current(a[0])) {
        candidate.kind = FusableStep::Kind::kRelu;
      } else if ((step.route == "aten.hardtanh.default" || step.route == "aten.clamp.default") &&
                 a.size() == 4 && is_current(a[0])) {
        candidate.kind = FusableStep::Kind::kClamp;
        candidate.min = -kInf;
        candidate.max = kInf;
        if (a[1].type != ArgValue::Type::None && !scalar_value(a[1], &candidate.min)) break;
        if (a[2].type != ArgValue::Type::None && !scalar_value(a[2], &candidate.max)) break;
      } else if (!a.empty() && is_current(a[0]) &&
                 eltwise_of(step.route, a, &candidate.eltwise, &candidate.alpha)) {
        candidate.kind = FusableStep::Kind::kEltwise;
      } else if (step.route == "aten.add.Tensor" && a.size() == 4 &&
                 (is_current(a[0]) != is_current(a[1]))) {
        double alpha = 0.0;
        const ArgValue& other = is_current(a[0]) ? a[1] : a[0];
        if (!scalar_value(a[2], &alpha) || alpha != 1.0 || other.type != ArgValue::Type::Tensor) {
          break;
        }
        const ValueSpec& operand = spec_.values[other.tensor];
        // Ready before the head runs: an input, a constant or an earlier op's result.
        bool ready = operand.kind == ValueKind::Input || operand.kind == ValueKind::Constant ||
                     (operand.producer >= 0 && operand.producer < static_cast<int64_t>(head));
        if (!ready || !same_tensor_type(operand, value)) break;
        candidate.kind = FusableStep::Kind::kAdd;
        candidate.residual = other.tensor;
      } else {
        break;
      }
      fusable_[head].push_back(candidate);
      current = result;
    }
  }
}

namespace {

// The view kernels plan_arena aliases (view_operands).
const char* const kViewKernels[] = {"aten::view_copy.out",         "aten::alias_copy.out",
                                    "aten::squeeze_copy.out",      "aten::squeeze_copy.dim_out",
                                    "aten::squeeze_copy.dims_out", "aten::unsqueeze_copy.out"};

// Whether `dims` (negative counting from the end) is a permutation of 0 .. dims.size() - 1.
bool is_permutation(const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (int64_t d : dims) {
    const int64_t dim = d < 0 ? d + rank : d;
    if (dim < 0 || dim >= rank || seen[static_cast<size_t>(dim)]) return false;
    seen[static_cast<size_t>(dim)] = true;
  }
  return true;
}

bool is_view_kernel(const std::string& kernel) {
  return std::any_of(std::begin(kViewKernels), std::end(kViewKernels),
                     [&kernel](const char* view) { return kernel == view; });
}

// The strides of `to` viewing the elements of a tensor of shape `from` laid out with
// `from_strides` (torch's rule for view on a strided tensor); false when no strides can.
bool view_strides(const std::vector<int64_t>& from, const std::vector<int64_t>& from_strides,
                  const std::vector<int64_t>& to, std::vector<int64_t>* out) {
  out->assign(to.size(), 0);
  if (from.empty() || to.empty()) return false;
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t chunk_base_stride = from_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = static_cast<int64_t>(from.size()) - 1; d >= 0; --d) {
    tensor_numel *= from[d];
    if (d == 0 ||
        (from[d - 1] != 1 && from_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || to[view_d] == 1)) {
        (*out)[view_d] = view_numel * chunk_base_stride;
        view_numel *= to[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = from_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

void CompiledGraph::compose_permutes() {
  const size_t num_ops = spec_.ops.size();
  composed_into_.assign(num_ops, -1);
  if (!kernel_switched_on("ET_CPU_FOLD_PERMUTE")) return;  // ET_CPU_FOLD_PERMUTE=0: none
  const size_t num_values = spec_.values.size();
  std::vector<int> reads;
  count_readers(&reads, nullptr);
  std::vector<bool> is_graph_output(num_values, false);
  for (int32_t id : spec_.outputs) is_graph_output[id] = true;
  const auto permute_operands = [&](size_t op, int32_t* in, int32_t* out) {
    const OpSpec& spec = spec_.ops[op];
    if (spec.kernel != "aten::permute_copy.out" || spec.args.size() < 3) return false;
    const ArgValue& a = spec.args[0];
    const ArgValue& dims = spec.args[1];
    const ArgValue& o = spec.args[2];
    if (a.type != ArgValue::Type::Tensor || o.type != ArgValue::Type::Tensor ||
        dims.type != ArgValue::Type::IntList || a.tensor < 0 || o.tensor < 0 ||
        a.tensor == o.tensor || dims.ints.size() != spec_.values[a.tensor].shape.size() ||
        !dims.int_exprs.empty() || !is_permutation(dims.ints)) {
      return false;
    }
    *in = a.tensor;
    *out = o.tensor;
    return true;
  };
  const auto planned_static = [&](int32_t id) {
    const ValueSpec& v = spec_.values[id];
    return v.kind == ValueKind::Intermediate && v.producer >= 0 && v.nbytes > 0 &&
           !v.is_dynamic() && v.dtype == ScalarType::Float;
  };
  // In execution order, so chains compose transitively: the second permute reads the first's
  // input with the composed dims, and the first (its output read by nothing else) never runs.
  for (size_t second = 0; second < num_ops; ++second) {
    int32_t middle = -1;
    int32_t result = -1;
    if (!permute_operands(second, &middle, &result)) continue;
    const int64_t first = spec_.values[middle].producer;
    int32_t source = -1;
    int32_t unused = -1;
    if (first < 0 || !permute_operands(static_cast<size_t>(first), &source, &unused) ||
        !planned_static(source) || !planned_static(middle) || reads[middle] != 1 ||
        is_graph_output[middle]) {
      continue;
    }
    const std::vector<int64_t>& d1 = spec_.ops[first].args[1].ints;
    std::vector<int64_t>& d2 = spec_.ops[second].args[1].ints;
    const int64_t rank = static_cast<int64_t>(d1.size());
    if (static_cast<int64_t>(d2.size()) != rank) continue;
    std::vector<int64_t> composed(d2.size());
    bool valid = true;
    for (size_t j = 0; j < d2.size() && valid; ++j) {
      const int64_t via = d2[j] < 0 ? d2[j] + rank : d2[j];
      valid = via >= 0 && via < rank;
      if (!valid) break;
      const int64_t from = d1[static_cast<size_t>(via)] < 0 ? d1[static_cast<size_t>(via)] + rank
                                                              : d1[static_cast<size_t>(via)];
      valid = from >= 0 && from < rank;
      composed[j] = from;
    }
    if (!valid) continue;
    d2 = std::move(composed);
    spec_.ops[second].args[0].tensor = source;
    ++reads[source];
    --reads[middle];
    composed_into_[static_cast<size_t>(first)] = static_cast<int64_t>(second);
  }
}

void CompiledGraph::find_strided_operands() {
  const size_t num_ops = spec_.ops.size();
  strided_offers_.assign(num_ops, {});
  strided_permutes_.assign(num_ops, {});
  folded_into_.assign(num_ops, -1);
  if (!kernel_switched_on("ET_CPU_FOLD_PERMUTE")) return;  // ET_CPU_FOLD_PERMUTE=0: none
  const size_t num_values = spec_.values.size();
  std::vector<int> reads;
  std::vector<int64_t> reader;
  count_readers(&reads, &reader);
  std::vector<bool> is_graph_output(num_values, false);
  for (int32_t id : spec_.outputs) is_graph_output[id] = true;
  // An arena intermediate of static shape read by exactly one op.
  const auto single_read_intermediate = [&](int32_t id) {
    const ValueSpec& v = spec_.values[id];
    return v.kind == ValueKind::Intermediate && v.producer >= 0 && v.nbytes > 0 &&
           !v.is_dynamic() && !is_graph_output[id] && reads[id] == 1;
  };
  for (size_t p = 0; p < num_ops; ++p) {
    const OpSpec& permute = spec_.ops[p];
    if (permute.kernel != "aten::permute_copy.out" || permute.args.size() < 3) continue;
    const ArgValue& in = permute.args.front();
    const ArgValue& dims = permute.args[1];
    const ArgValue& out = permute.args[2];
    if (in.type != ArgValue::Type::Tensor || out.type != ArgValue::Type::Tensor ||
        dims.type != ArgValue::Type::IntList || in.tensor < 0 || out.tensor < 0 ||
        in.tensor == out.tensor) {
      continue;
    }
    const ValueSpec& source = spec_.values[in.tensor];
    if (source.kind != ValueKind::Intermediate || source.producer < 0 || source.nbytes == 0 ||
        source.is_dynamic() || source.dtype != ScalarType::Float ||
        spec_.values[out.tensor].dtype != ScalarType::Float ||
        dims.ints.size() != source.shape.size() || !is_permutation(dims.ints) ||
        !single_read_intermediate(out.tensor)) {
      continue;
    }
    // The permute's output as strides over its input's contiguous bytes.
    const size_t rank = source.shape.size();
    std::vector<int64_t> contiguous(rank, 1);
    for (size_t d = rank; d-- > 1;) contiguous[d - 1] = contiguous[d] * source.shape[d];
    std::vector<int64_t> shape(rank);
    std::vector<int64_t> strides(rank);
    bool valid = true;
    for (size_t d = 0; d < rank; ++d) {
      int64_t from = dims.ints[d] < 0 ? dims.ints[d] + static_cast<int64_t>(rank) : dims.ints[d];
      if (from < 0 || from >= static_cast<int64_t>(rank)) valid = false;
      if (!valid) break;
      shape[d] = source.shape[static_cast<size_t>(from)];
      strides[d] = contiguous[static_cast<size_t>(from)];
    }
    if (!valid || shape != spec_.values[out.tensor].shape) continue;
    // Follow views and scalings by a constant (each the only reader of the value before it) to
    // the product. A scaling (attention's q @ k^T * scale decomposes to k^T * sqrt(scale)) is
    // elementwise on contiguous bytes: it scales the permute's input in its own order, and its
    // result carries the permuted strides on.
    int32_t current = out.tensor;
    int64_t next = reader[current];
    std::vector<const EValue*> chain = {&tensors_[in.tensor].evalue, &tensors_[current].evalue};
    while (next >= 0 &&
           ((is_view_kernel(spec_.ops[next].kernel) &&
             spec_.ops[next].provider == kReferenceProviderId) ||
            spec_.ops[next].kernel == "aten::mul.Scalar_out")) {
      const OpSpec& view = spec_.ops[next];
      const bool scaling = view.kernel == "aten::mul.Scalar_out";
      if (view.args.size() < (scaling ? 3u : 2u) ||
          view.args.front().type != ArgValue::Type::Tensor ||
          view.args.front().tensor != current || view.args.back().type != ArgValue::Type::Tensor ||
          (scaling && view.args[1].type != ArgValue::Type::Double &&
           view.args[1].type != ArgValue::Type::Int)) {
        next = -1;
        break;
      }
      const int32_t result = view.args.back().tensor;
      const ValueSpec& to = spec_.values[result];
      std::vector<int64_t> viewed;
      if (result < 0 || result == current || to.dtype != ScalarType::Float ||
          to.nbytes != spec_.values[current].nbytes ||
          to.producer != static_cast<int64_t>(next) || !single_read_intermediate(result) ||
          (scaling ? to.shape != spec_.values[current].shape
                   : !view_strides(spec_.values[current].shape, strides, to.shape, &viewed))) {
        next = -1;
        break;
      }
      if (!scaling) strides = std::move(viewed);
      current = result;
      chain.push_back(&tensors_[current].evalue);
      next = reader[current];
    }
    if (next < 0 || next <= static_cast<int64_t>(p)) continue;
    const OpSpec& product = spec_.ops[next];
    if ((product.kernel != "aten::bmm.out" && product.kernel != "aten::mm.out") ||
        product.provider == kReferenceProviderId || product.args.size() < 3) {
      continue;
    }
    for (size_t a = 0; a < 2; ++a) {
      const ArgValue& operand = product.args[a];
      if (operand.type == ArgValue::Type::Tensor && operand.tensor == current) {
        StridedOperand offer;
        offer.arg = a;
        offer.strides = strides;
        offer.permute = permute.name.c_str();
        offer.keep_plain = chain;
        strided_offers_[next].push_back(std::move(offer));
        strided_permutes_[next].push_back(static_cast<int32_t>(p));
      }
    }
  }
}

Error CompiledGraph::bind_ops() {
  ops_.resize(spec_.ops.size());
  fused_steps_.assign(spec_.ops.size(), 0);
  const KernelProvider& reference = reference_provider();
  sessions_.resize(256);
  session_by_id_.assign(256, nullptr);
  std::vector<bool> opened(256, false);
  std::vector<bool> graph_output(spec_.values.size(), false);
  for (int32_t id : spec_.outputs) graph_output[id] = true;
  // A state's update is read after the call (copied into the state): never left unwritten.
  for (const ValueSpec& value : spec_.values) {
    if (value.kind == ValueKind::State) graph_output[value.state_update] = true;
  }
  for (size_t i = 0; i < spec_.ops.size(); ++i) {
    const OpSpec& spec = spec_.ops[i];
    Op& op = ops_[i];
    if (op.provider != nullptr) continue;  // fused into an earlier op
    op.args.reserve(spec.args.size() + 1);
    std::vector<char> constant_flags;
    std::vector<char> unread_flags;
    for (const ArgValue& arg : spec.args) {
      op.args.push_back(build_arg(arg));
      const bool is_tensor = arg.type == ArgValue::Type::Tensor;
      const ValueSpec* value = is_tensor ? &spec_.values[arg.tensor] : nullptr;
      constant_flags.push_back(is_tensor && value->kind == ValueKind::Constant);
      unread_flags.push_back(is_tensor && value->kind == ValueKind::Intermediate &&
                             value->producer == static_cast<int64_t>(i) &&
                             value->last_use <= value->producer && !graph_output[arg.tensor]);
    }
    // ExecuTorch's generated kernel wrappers take one stack slot after the arguments for the
    // result (executorch/codegen/gen.py: num_boxed_args = arguments + 1) and may overwrite it.
    list_evalues_.emplace_back();
    op.args.push_back(&list_evalues_.back());
    constant_flags.push_back(false);
    unread_flags.push_back(false);
    std::unique_ptr<bool[]> is_constant(new bool[constant_flags.size()]);
    std::unique_ptr<bool[]> is_unread(new bool[unread_flags.size()]);
    for (size_t a = 0; a < constant_flags.size(); ++a) {
      is_constant[a] = constant_flags[a] != 0;
      is_unread[a] = unread_flags[a] != 0;
    }

    OpBinding binding{spec.name.c_str(), spec.route.c_str(), spec.kernel.c_str(), spec.flags,
                      Span<EValue*>(op.args.data(), op.args.size())};
    binding.arg_is_constant = is_constant.get();
    binding.arg_is_unread = is_unread.get();
    bool_lists_.push_back(std::move(is_constant));
    bool_lists_.push_back(std::move(is_unread));
    const KernelProvider* provider = find_kernel_provider(spec.provider);
    Error error = Error::NotSupported;
    std::string reason = "no such provider in this build";
    size_t fused = 0;
    bool strided_taken = false;
    std::vector<FusableStep> steps;
    if (provider != nullptr && provider != &reference) {
      if (!opened[spec.provider]) {
        opened[spec.provider] = true;
        const ProviderSession* shared =
            base_ != nullptr ? base_->session_by_id_[spec.provider] : nullptr;
        sessions_[spec.provider] =
            provider->open_session(shared, base_ != nullptr || spec_.is_dynamic());
        session_by_id_[spec.provider] = sessions_[spec.provider].get();
      }
      for (const FusionCandidate& c : fusable_[i]) {
        FusableStep step;
        step.kind = c.kind;
        step.min = c.min;
        step.max = c.max;
        step.eltwise = c.eltwise;
        step.alpha = c.alpha;
        step.residual = c.residual >= 0 ? &tensors_[c.residual].evalue : nullptr;
        step.output = &tensors_[c.output].evalue;
        step.op_name = spec_.ops[c.op].name.c_str();
        if (c.kind == FusableStep::Kind::kConv) {
          const std::vector<ArgValue>& conv_args = spec_.ops[c.op].args;
          std::vector<EValue*>& values = step_args_.emplace_back();
          std::unique_ptr<bool[]> constant(new bool[conv_args.size()]);
          for (size_t a = 0; a < conv_args.size(); ++a) {
            values.push_back(build_arg(conv_args[a]));
            constant[a] = conv_args[a].type == ArgValue::Type::Tensor &&
                          spec_.values[conv_args[a].tensor].kind == ValueKind::Constant;
          }
          step.args = Span<EValue*>(values.data(), values.size());
          step.arg_is_constant = constant.get();
          bool_lists_.push_back(std::move(constant));
        }
        steps.push_back(step);
      }
      binding.session = session_by_id_[spec.provider];
      binding.strided = Span<const StridedOperand>(strided_offers_[i].data(),
                                                   strided_offers_[i].size());
      binding.strided_taken = &strided_taken;
      binding.fusable = Span<const FusableStep>(steps.data(), steps.size());
      binding.fused_steps = &fused;
      binding.decline_reason = &reason;
      binding.bound_in_base = base_ != nullptr && base_->ops_[i].provider == provider &&
                              base_->ops_[i].kernel != nullptr;
      binding.base_fused_steps = binding.bound_in_base ? base_->fused_steps_[i] : 0;
      reason.clear();
      const et_timestamp_t bind_start = executorch::runtime::pal_current_ticks();
      error = provider->bind(binding, &op.kernel);
      (base_ != nullptr ? base_->ops_[i] : op).bind_ticks +=
          executorch::runtime::pal_current_ticks() - bind_start;
      if (error != Error::Ok && error != Error::NotSupported) {
        return report_error(error, "op %zu (%s, route '%s'): provider %s failed to bind kernel %s",
                            i, spec.name.c_str(), spec.route.c_str(), provider->name(),
                            spec.kernel.c_str());
      }
      op.provider = provider;
      if (error == Error::Ok) {
        if (fused > steps.size()) fused = steps.size();
        fused_steps_[i] = fused;
        op.placement = std::string(spec.name) + " " + spec.kernel + ": " + provider->name();
        if (strided_taken) {
          // Its permutes never run: their outputs are their inputs' bytes (plan_arena).
          for (int32_t p : strided_permutes_[i]) {
            folded_into_[static_cast<size_t>(p)] = static_cast<int64_t>(i);
            ops_[p].placement = spec_.ops[p].name + " " + spec_.ops[p].kernel +
                                ": folded into " + spec.name + " (" + provider->name() +
                                " reads its input with the permuted strides)";
          }
        }
        for (size_t f = 0; f < fused; ++f) {
          Op& skipped = ops_[i + 1 + f];
          skipped.provider = provider;
          skipped.placement = spec_.ops[i + 1 + f].name + " " + spec_.ops[i + 1 + f].kernel +
                              ": fused into " + spec.name + " (" + provider->name() + ")";
        }
      }
    }
    if (error == Error::NotSupported) {
      // Declined (or no such provider in this build): ExecuTorch's own kernel takes it.
      op.placement = std::string(spec.name) + " " + spec.kernel + ": Reference";
      if (spec.provider != kReferenceProviderId) {
        op.placement += " (declined by " +
                        std::string(provider != nullptr ? provider->name() : "a missing provider") +
                        ": " + (reason.empty() ? "no reason given" : reason) + ")";
      }
      op.provider = &reference;
      error = reference.bind(binding, &op.kernel);
      // Anything but a missing kernel was reported by the kernel's binder (a built-in kernel).
      if (error != Error::Ok && error != Error::OperatorMissing) return error;
      if (error != Error::Ok) {
        return report_error(error,
                            "op %zu (%s, route '%s'): kernel %s is not in ExecuTorch's operator "
                            "registry",
                            i, spec.name.c_str(), spec.route.c_str(), spec.kernel.c_str());
      }
    }
  }
  return Error::Ok;
}

Error CompiledGraph::finalize_sessions() {
  // Sessions learn which tensors other providers (or the caller) read, then may settle layouts.
  for (size_t id = 0; id < sessions_.size(); ++id) {
    if (!sessions_[id]) continue;
    const KernelProvider* owner = find_kernel_provider(static_cast<uint8_t>(id));
    std::unordered_set<const TensorImpl*> outside;
    for (int32_t v : spec_.outputs) outside.insert(tensors_[v].impl.get());
    // States persist across calls and their updates are copied into them: plain layout.
    for (size_t v = 0; v < spec_.values.size(); ++v) {
      if (spec_.values[v].kind != ValueKind::State) continue;
      outside.insert(tensors_[v].impl.get());
      outside.insert(tensors_[spec_.values[v].state_update].impl.get());
    }
    for (size_t j = 0; j < spec_.ops.size(); ++j) {
      if (ops_[j].provider == owner) continue;
      for (const ArgValue& arg : spec_.ops[j].args) {
        if (arg.type == ArgValue::Type::Tensor) outside.insert(tensors_[arg.tensor].impl.get());
        for (int32_t t : arg.tensors) {
          if (t >= 0) outside.insert(tensors_[t].impl.get());
        }
      }
    }
    Error error = sessions_[id]->finalize(
        [&outside](const TensorImpl* tensor) { return outside.count(tensor) > 0; });
    if (error != Error::Ok) {
      return report_error(error, "provider %s failed to finalize the graph's kernels",
                          owner != nullptr ? owner->name() : "?");
    }
  }
  // Outputs: the first listing of an Output value is bound to the caller's buffer; anything else
  // (an input or intermediate listed as output, a repeated output) is copied after the run.
  output_is_copy_.assign(spec_.outputs.size(), true);
  std::vector<bool> bound(spec_.values.size(), false);
  for (size_t o = 0; o < spec_.outputs.size(); ++o) {
    int32_t id = spec_.outputs[o];
    if (spec_.values[id].kind == ValueKind::Output && !bound[id]) {
      bound[id] = true;
      output_is_copy_[o] = false;
    }
  }
  return Error::Ok;
}

size_t CompiledGraph::num_ops_on_other_providers() const {
  size_t count = 0;
  for (const Op& op : ops_) count += op.provider != &reference_provider() ? 1 : 0;
  return count;
}

size_t CompiledGraph::num_fused_ops() const {
  size_t count = 0;
  for (const Op& op : ops_) count += op.kernel == nullptr ? 1 : 0;
  return count;
}

size_t CompiledGraph::provider_bytes() const {
  size_t bytes = 0;
  for (const auto& session : sessions_) bytes += session ? session->held_bytes() : 0;
  return bytes;
}

std::string CompiledGraph::placement() const {
  std::string text;
  if (spec_.is_dynamic()) {
    text += "symbolic dimensions:";
    for (const SymbolSpec& symbol : spec_.symbols) {
      text += " " + symbol.name + " in [" + std::to_string(symbol.min) + ", " +
              std::to_string(symbol.max) + "]";
    }
    text += "; arena planned for the upper bounds; " +
            (resize_in_place_ ? std::string("new sizes resized in place (ET_CPU_RESIZE_IN_PLACE)")
                              : "up to " + std::to_string(max_variants_) +
                                    " shape plans cached (ET_CPU_SHAPE_PLANS)") +
            "\n";
  }
  for (const Op& op : ops_) text += op.placement + "\n";
  for (const auto& session : sessions_) {
    if (session && !session->summary().empty()) text += session->summary() + "\n";
  }
  return text;
}

Error CompiledGraph::check_io(const EValue* given, int32_t id, const char* role,
                              size_t position) const {
  const ValueSpec& value = spec_.values[id];
  if (given == nullptr || !given->isTensor()) {
    return report_error(Error::InvalidArgument, "%s %zu (%s): expected a %s tensor of shape %s, "
                        "got a non-tensor", role, position, value.name.c_str(),
                        dtype_name(value.dtype), shape_string(value.shape).c_str());
  }
  const auto& tensor = given->toTensor();
  bool same_shape = static_cast<size_t>(tensor.dim()) == value.shape.size();
  for (size_t d = 0; same_shape && d < value.shape.size(); ++d) {
    same_shape = tensor.size(static_cast<ssize_t>(d)) == value.shape[d];
  }
  if (tensor.scalar_type() != value.dtype || !same_shape) {
    return report_error(Error::InvalidArgument,
                        "%s %zu (%s): expected dtype %s shape %s, got dtype %s shape %s", role,
                        position, value.name.c_str(), dtype_name(value.dtype),
                        shape_string(value.shape).c_str(), dtype_name(tensor.scalar_type()),
                        shape_string(tensor.sizes()).c_str());
  }
  auto dim_order = tensor.dim_order();
  for (size_t d = 0; d < dim_order.size(); ++d) {
    if (dim_order[d] != static_cast<executorch::aten::DimOrderType>(d)) {
      return report_error(Error::InvalidArgument,
                          "%s %zu (%s): expected a contiguous tensor, got a permuted dim order",
                          role, position, value.name.c_str());
    }
  }
  if (value.nbytes > 0 && tensor.const_data_ptr() == nullptr) {
    return report_error(Error::InvalidArgument, "%s %zu (%s): tensor has no data", role, position,
                        value.name.c_str());
  }
  return Error::Ok;
}

Error CompiledGraph::execute(Span<EValue*> args, MemoryAllocator* temp_allocator,
                             executorch::runtime::EventTracer* tracer) {
  // The graph's tensors, arena and kernels' buffers are one call's: two at once would corrupt
  // each other's results.
  if (executing_.exchange(true, std::memory_order_acquire)) {
    return report_error(Error::InvalidState,
                        "this delegate is already executing on another thread: a loaded method "
                        "runs one call at a time (load one module per thread to run in parallel)");
  }
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false, std::memory_order_release); }
  } done{executing_};
  if (spec_.is_dynamic()) return execute_dynamic(args, temp_allocator, tracer);
  return run(args, temp_allocator, tracer);
}

Error CompiledGraph::execute_dynamic(Span<EValue*> args, MemoryAllocator* temp_allocator,
                                     executorch::runtime::EventTracer* tracer) {
  const size_t num_inputs = spec_.inputs.size();
  if (args.size() != num_inputs + spec_.outputs.size()) return run(args, temp_allocator, tracer);
  std::vector<int64_t> symbols;
  Error error = solve_symbols(spec_, Span<EValue*>(args.data(), num_inputs), &symbols);
  if (error != Error::Ok) return error;
  // Outputs take the concrete sizes (the program planned their buffers for the upper bounds).
  for (size_t o = 0; o < spec_.outputs.size(); ++o) {
    EValue* given = args[num_inputs + o];
    if (given == nullptr || !given->isTensor()) continue;  // check_io reports it
    const ValueSpec& value = spec_.values[spec_.outputs[o]];
    const std::vector<int64_t> shape = concrete_shape(value, symbols);
    std::vector<executorch::aten::SizesType> sizes(shape.begin(), shape.end());
    Error resized = executorch::runtime::resize_tensor(
        given->toTensor(), ArrayRef<executorch::aten::SizesType>(sizes.data(), sizes.size()));
    if (resized != Error::Ok) {
      return report_error(Error::InvalidArgument,
                          "output %zu (%s): cannot resize the caller's tensor from %s to %s "
                          "(error 0x%x)",
                          o, value.name.c_str(), shape_string(given->toTensor().sizes()).c_str(),
                          shape_string(shape).c_str(), static_cast<unsigned>(resized));
    }
  }
  // The one look-up of the call (resizing in place leaves variants_ as it is).
  const ShapePlans::iterator found = find_shape_plan(symbols);
  if (resize_in_place_) {
    // A size met before whose shape plan is cached, or called again in a row where a session
    // says its own shape plan runs faster (a CNN's plans per image over a batch): that plan.
    // The first call at a size resizes in place (cheap).
    if (found != variants_.end() ||
        (symbols == current_symbols_ && calls_in_place_ > 0 && faster_as_shape_plan())) {
      return run_shape_plan(symbols, found, args, temp_allocator, tracer);
    }
  }
  const bool new_size = symbols != current_symbols_;
  // The same sizes called again in a row, whose first call ran plans standing in (a linear's
  // small tiles): those kernels prepare the plans they keep (once: checked at the second call).
  const bool stood_in = !new_size && calls_in_place_ == 1 && plans_stand_in();
  if (resize_in_place_ && (new_size || stood_in)) {
    const et_timestamp_t start = executorch::runtime::pal_current_ticks();
    error = new_size ? resize_to(symbols) : prepare_standing_in();
    const uint64_t ticks = executorch::runtime::pal_current_ticks() - start;
    if (new_size) {
      resize_ticks_ += ticks;
      calls_in_place_ = 0;
    } else {
      stand_in_ticks_ += ticks;
    }
    if (error == Error::Ok) {
      ++(new_size ? resizes_ : stand_in_prepares_);
    } else {
      // Back to the bounds (the kernels' plans were partly remade), then shape plans.
      resize_in_place_ = false;
      log_line(LogLevel::kInfo, "resizing in place declined at these sizes: shape plans instead");
      error = resize_to(upper_bounds(spec_));
      if (error == Error::Ok && plans_stand_in()) error = prepare_standing_in();  // kept there
      if (error != Error::Ok) {
        return report_error(error, "the graph cannot be prepared again at its upper bounds");
      }
      current_symbols_ = upper_bounds(spec_);
    }
  }
  if (resize_in_place_) {
    ++calls_in_place_;
    return run(args, temp_allocator, tracer);
  }
  if (symbols == upper_bounds(spec_)) {
    ++shape_plan_hits_;  // this graph is compiled for the upper bounds
    ++total_hits;
    return run(args, temp_allocator, tracer);
  }
  return run_shape_plan(symbols, found, args, temp_allocator, tracer);
}

bool CompiledGraph::faster_as_shape_plan() const {
  return std::any_of(sessions_.begin(), sessions_.end(), [](const auto& session) {
    return session && session->faster_as_shape_plan();
  });
}

bool CompiledGraph::plans_stand_in() const {
  return std::any_of(sessions_.begin(), sessions_.end(), [](const auto& session) {
    return session && session->plans_stand_in();
  });
}

Error CompiledGraph::prepare_standing_in() {
  for (const auto& session : sessions_) {
    if (!session || !session->plans_stand_in()) continue;
    const Error error = session->prepare_standing_in();
    if (error != Error::Ok) return error;
  }
  return Error::Ok;
}

CompiledGraph::ShapePlans::iterator CompiledGraph::find_shape_plan(
    const std::vector<int64_t>& symbols) {
  return std::find_if(variants_.begin(), variants_.end(),
                      [&symbols](const auto& entry) { return entry.first == symbols; });
}

Error CompiledGraph::run_shape_plan(const std::vector<int64_t>& symbols,
                                    ShapePlans::iterator found, Span<EValue*> args,
                                    MemoryAllocator* temp_allocator,
                                    executorch::runtime::EventTracer* tracer) {
  if (found != variants_.end()) {
    ++shape_plan_hits_;
    ++total_hits;
    std::rotate(variants_.begin(), found, found + 1);  // most recently used first
  } else {
    ++shape_plan_misses_;
    ++total_misses;
    std::unique_ptr<CompiledGraph> variant;
    const et_timestamp_t start = executorch::runtime::pal_current_ticks();
    GraphSpec sized = specialize(spec_, symbols);
    size_compile_ticks_.specialize += executorch::runtime::pal_current_ticks() - start;
    const Error error = compile_spec(std::move(sized), nullptr, this, &variant);
    if (error != Error::Ok) return error;
    size_compile_ticks_ += variant->compile_ticks_;  // its specialize is timed here, above
    ++sizes_compiled_;
    if (variants_.size() >= max_variants_) variants_.pop_back();
    variants_.emplace(variants_.begin(), symbols, std::move(variant));
  }
  return variants_.front().second->run(args, temp_allocator, tracer);
}

bool CompiledGraph::can_resize_in_place() const {
  if (!state_writes_.empty()) return false;  // states keep the bounds' row writes
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (folded_into_[i] >= 0) return false;  // a product reads it with the bounds' strides
    const Op& op = ops_[i];
    if (op.kernel == nullptr || op.alias) continue;  // fused, or never runs
    if (!op.kernel->resizable()) {
      log_line(LogLevel::kInfo, "resizing in place: this kernel cannot, shape plans instead: %s",
               op.placement.c_str());
      return false;
    }
  }
  return true;
}

Error CompiledGraph::resize_to(const std::vector<int64_t>& symbols) {
  // The shapes evaluated in place and one sizes buffer for all (no allocation per value: a
  // decoder has a few hundred dynamic values, each resized at every new size).
  std::vector<executorch::aten::SizesType> sizes;
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    ValueSpec& value = spec_.values[i];
    if (!value.is_dynamic()) continue;
    const size_t rank = value.dim_exprs.size();
    value.shape.resize(rank);
    sizes.resize(rank);
    size_t elements = 1;
    for (size_t d = 0; d < rank; ++d) {
      value.shape[d] = evaluate_size(value.dim_exprs[d], symbols);  // concrete_shape's values
      sizes[d] = static_cast<executorch::aten::SizesType>(value.shape[d]);
      elements *= static_cast<size_t>(value.shape[d]);
    }
    value.nbytes = elements * element_size(value.dtype);
    Error error = executorch::runtime::resize_tensor(
        executorch::aten::Tensor(tensors_[i].impl.get()),
        ArrayRef<executorch::aten::SizesType>(sizes.data(), sizes.size()));
    if (error != Error::Ok) {
      return report_error(error, "value %zu (%s): cannot resize to %s", i, value.name.c_str(),
                          shape_string(value.shape).c_str());
    }
  }
  for (const SymbolicArg& arg : symbolic_args_) *arg.value = EValue(evaluate_size(arg.expr, symbols));
  for (const auto& session : sessions_) {
    if (!session) continue;
    Error error = session->resize();
    if (error != Error::Ok) return error;
  }
  current_symbols_ = symbols;
  return Error::Ok;
}

Error CompiledGraph::run(Span<EValue*> args, MemoryAllocator* temp_allocator,
                         executorch::runtime::EventTracer* tracer) {
  const et_timestamp_t call_start = profile_ ? executorch::runtime::pal_current_ticks() : 0;
  const size_t num_inputs = spec_.inputs.size();
  const size_t num_outputs = spec_.outputs.size();
  if (args.size() != num_inputs + num_outputs) {
    return report_error(Error::InvalidArgument,
                        "delegate called with %zu arguments, the graph has %zu inputs and %zu "
                        "outputs",
                        args.size(), num_inputs, num_outputs);
  }
  for (size_t i = 0; i < num_inputs; ++i) {
    Error error = check_io(args[i], spec_.inputs[i], "input", i);
    if (error != Error::Ok) return error;
    if (spec_.values[spec_.inputs[i]].nbytes > 0) {
      tensors_[spec_.inputs[i]].impl->set_data(args[i]->toTensor().mutable_data_ptr());
    }
  }
  for (size_t o = 0; o < num_outputs; ++o) {
    EValue* given = args[num_inputs + o];
    Error error = check_io(given, spec_.outputs[o], "output", o);
    if (error != Error::Ok) return error;
    if (!output_is_copy_[o] && spec_.values[spec_.outputs[o]].nbytes > 0) {
      tensors_[spec_.outputs[o]].impl->set_data(given->toTensor().mutable_data_ptr());
    }
  }
  // One pair of clock reads per kernel call serves both ET_CPU_PROFILE and the event tracer; the
  // ticks are the PAL clock's, the one ETDump times DELEGATE_CALL with. Events are logged after
  // the last kernel, so that logging does not sit between kernels (and in their times).
  const bool timed = profile_ || tracer != nullptr;
  // The providers' sessions know the call is on until it returns, whichever way.
  struct CallScope {
    std::vector<std::unique_ptr<ProviderSession>>& sessions;
    explicit CallScope(std::vector<std::unique_ptr<ProviderSession>>& s) : sessions(s) {
      for (const auto& session : sessions) {
        if (session) session->call_started();
      }
    }
    ~CallScope() {
      for (const auto& session : sessions) {
        if (session) session->call_finished();
      }
    }
  } call_scope(sessions_);
  // ET_CPU_PROFILE: the call's time outside its kernels (CallTicks).
  CallTicks call;
  et_timestamp_t previous_end = profile_ ? executorch::runtime::pal_current_ticks() : 0;
  call.entry = previous_end - call_start;
  for (size_t i = 0; i < ops_.size(); ++i) {
    Op& op = ops_[i];
    if (op.kernel == nullptr) continue;  // fused into an earlier op
    if (op.alias) continue;  // its output is its input's bytes: no call, no event
    KernelRuntimeContext context(nullptr, temp_allocator);
    const et_timestamp_t start = timed ? executorch::runtime::pal_current_ticks() : 0;
    Error error = op.kernel->run(context);
    if (timed) {
      const et_timestamp_t end = executorch::runtime::pal_current_ticks();
      if (profile_) {
        Op& timed_op = base_ != nullptr ? base_->ops_[i] : op;  // same ops, same order
        (timed_op.runs == 0 ? timed_op.first_ticks : timed_op.ticks) += end - start;
        ++timed_op.runs;
        call.between += start - previous_end;
        call.kernels += end - start;
        previous_end = end;
      }
      op.last_start = start;
      op.last_end = end;
    }
    if (error != Error::Ok) {
      const OpSpec& spec = spec_.ops[i];
      return report_error(error, "op %zu (%s): kernel %s on provider %s failed with error 0x%x", i,
                          spec.name.c_str(), spec.kernel.c_str(), op.provider->name(),
                          static_cast<unsigned>(error));
    }
  }
  if (tracer != nullptr) {
    for (const Op& op : ops_) {
      if (op.kernel == nullptr || op.alias) continue;
      executorch::runtime::event_tracer_log_profiling_delegate(tracer, op.event_name.c_str(),
                                                               kNamedEvent, op.last_start,
                                                               op.last_end);
    }
  }
  // States not updated in place take their update's bytes (memmove: an update may be a view of
  // the state itself).
  for (const StateWrite& write : state_writes_) {
    const ValueSpec& state = spec_.values[write.state];
    if (write.in_place || state.nbytes == 0) continue;
    std::memmove(tensors_[write.state].impl->mutable_data(), tensors_[write.update].impl->data(),
                 state.nbytes);
  }
  for (size_t o = 0; o < num_outputs; ++o) {
    const ValueSpec& value = spec_.values[spec_.outputs[o]];
    if (output_is_copy_[o] && value.nbytes > 0) {
      std::memcpy(args[num_inputs + o]->toTensor().mutable_data_ptr(),
                  tensors_[spec_.outputs[o]].impl->data(), value.nbytes);
    }
  }
  if (profile_) {
    const et_timestamp_t call_end = executorch::runtime::pal_current_ticks();
    CallTicks& sum = base_ != nullptr ? base_->call_ticks_ : call_ticks_;
    if (sum.calls++ > 0) {  // the first call is cold, as in the per-op means
      sum.total += call_end - call_start;
      sum.kernels += call.kernels;
      sum.entry += call.entry;
      sum.between += call.between;
      sum.exit += call_end - previous_end;
    }
  }
  return Error::Ok;
}

}  // namespace cpu
}  // namespace et_cpu_plugin
