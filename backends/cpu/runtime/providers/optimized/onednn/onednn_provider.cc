// The Provider: threads, work-sharing buffers, memory accounting, ISA; post-op attributes.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <sched.h>

#include <limits>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// $ET_CPU_ONEDNN_THREADS (1 to 1024; unset or 0: the CPUs this process may run on); never more
// than those CPUs (more threads than cores only queue behind each other).
int default_thread_count() {
  int cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cpus = std::max(1, CPU_COUNT(&set));
  }
  const int64_t wanted = switch_number("ET_CPU_ONEDNN_THREADS", 0, 0, 1024);
  return wanted > 0 ? static_cast<int>(std::min<int64_t>(wanted, cpus)) : cpus;
}

// $ET_CPU_ONEDNN_TASK_FLOPS (0 or more), default 1,000,000.
int64_t default_min_task_flops() {
  return switch_number("ET_CPU_ONEDNN_TASK_FLOPS", 1000000, 0,
                       std::numeric_limits<int64_t>::max());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Post-ops

Support check_post_ops(const PostOps& post_ops) {
  int adds = 0;
  for (size_t i = 0; i < post_ops.size(); ++i) {
    const PostOp& op = post_ops[i];
    if (op.kind == PostOp::Kind::kAdd && ++adds > 1) {
      return Support::no("post_ops[" + std::to_string(i) + "]: only one residual add is fused");
    }
    if (op.kind == PostOp::Kind::kClamp && !(op.min <= op.max)) {
      return Support::no(
          "post_ops[" + std::to_string(i) + "]: clamp min " + std::to_string(op.min) +
          " > max " + std::to_string(op.max));
    }
    if (op.kind == PostOp::Kind::kActivation) {
      const Support ok = supports_activation(op.activation);
      if (!ok.ok) return Support::no("post_ops[" + std::to_string(i) + "]: " + ok.reason);
    }
  }
  return Support::yes();
}

dnnl::primitive_attr make_attr(const PostOps& post_ops) {
  dnnl::post_ops ops;
  for (const PostOp& op : post_ops) {
    switch (op.kind) {
      case PostOp::Kind::kAdd:
        // sum: dst = result + dst_before, so run() puts the residual into dst first.
        ops.append_sum(1.0f);
        break;
      case PostOp::Kind::kRelu:
        ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        break;
      case PostOp::Kind::kClamp:
        ops.append_eltwise(dnnl::algorithm::eltwise_clip, op.min, op.max);
        break;
      case PostOp::Kind::kActivation: {
        float alpha = 0.0f;
        float beta = 0.0f;
        const dnnl::algorithm algorithm = eltwise_algorithm(op.activation, &alpha, &beta);
        ops.append_eltwise(algorithm, alpha, beta);
        break;
      }
    }
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  // One scratchpad per Provider, shared by its plans (they run one at a time).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

bool has_add(const PostOps& post_ops) {
  return std::any_of(post_ops.begin(), post_ops.end(), [](const PostOp& op) {
    return op.kind == PostOp::Kind::kAdd;
  });
}

// ---------------------------------------------------------------------------------------------
// Provider

Provider::Provider(ProviderOptions options) : state_(std::make_shared<ProviderState>()) {
  ProviderState& state = *state_;
  state.num_threads = options.num_threads > 0 ? options.num_threads : default_thread_count();
  state.min_task_flops =
      options.min_task_flops >= 0 ? options.min_task_flops : default_min_task_flops();
  state.weight_cache = options.weight_cache;
  state.even_shares = kernel_switched_on("ET_CPU_EVEN_SHARES");
  state.size_independent_plans = options.size_independent_plans;
  state.first_call_stand_ins = options.size_independent_plans && options.first_call_stand_ins;
  if (options.same_engine != nullptr) {
    state.engine = options.same_engine->state_->engine;
    state.stream = dnnl::stream(state.engine);
  }
  if (options.work_sharing) {
    state.omp_threads = 1;
    if (state.num_threads > 1) {  // one thread never splits: no pool, no per-thread buffers
      state.pool = WorkPool::shared(state.num_threads);
      for (int i = 0; i < state.num_threads; ++i) {
        state.piece_streams.emplace_back(state.engine);
      }
      state.piece_scratchpads.resize(static_cast<size_t>(state.num_threads));
      state.piece_outputs.resize(static_cast<size_t>(state.num_threads));
    }
    state.block_expanded.resize(static_cast<size_t>(state.num_threads));
    state.block_depthwise.resize(static_cast<size_t>(state.num_threads));
  } else {
    state.omp_threads = state.num_threads;
  }
}

Provider::~Provider() = default;

int Provider::num_threads() const {
  return state_->num_threads;
}
bool Provider::work_sharing() const {
  return state_->omp_threads == 1 && state_->pool != nullptr;
}
WorkPool* Provider::work_pool() const {
  return work_sharing() ? state_->pool.get() : nullptr;
}
WeightCache* Provider::weight_cache() const {
  return state_->weight_cache.get();
}
bool Provider::size_independent_plans() const {
  return state_->size_independent_plans;
}
bool Provider::first_call_stand_ins() const {
  return state_->first_call_stand_ins;
}
size_t Provider::weights_bytes() const {
  return state_->weights_bytes;
}
size_t Provider::scratchpad_bytes() const {
  return state_->scratchpad_total();
}
size_t Provider::staging_bytes() const {
  return state_->staging_bytes;
}

std::string Provider::isa() const {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2_vnni_2:
      return "avx2_vnni_2";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_fp16:
      return "avx512_core_fp16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_amx_fp16:
      return "avx512_core_amx_fp16";
    default:
      return "other";
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
