// OptimizedSession (see session.h): the memory it reports, its one-line summary, finalize's
// layout chaining with its plain-layout fallback, and preparing kernels again in place at new
// sizes (resize, prepare_standing_in).
#include "backends/cpu/runtime/providers/optimized/session.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "backends/cpu/runtime/error_report.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

using executorch::runtime::Error;

namespace {

// Kernels resize() prepared again, over the process (the loader's resize_prepare_count).
std::atomic<uint64_t> resize_prepares{0};

// ET_CPU_ONEDNN_WORK_SHARING=0 runs each op whole on oneDNN's OpenMP team instead.
bool work_sharing_enabled() { return onednn::kernel_switched_on("ET_CPU_ONEDNN_WORK_SHARING"); }

// ET_CPU_ONEDNN_CHAIN=0 keeps every activation plain (for measuring what chaining saves).
bool chaining_enabled() { return onednn::kernel_switched_on("ET_CPU_ONEDNN_CHAIN"); }

// Test hook, ET_CPU_TEST_FAIL_RESIZE_AT=N (N >= 1): the session's N-th resize() fails after
// preparing half its kernels again, as a kernel oneDNN declines at the new sizes would (read once,
// when the session opens; resize_in_place_test checks the graph's fallback with it). 0: never.
size_t test_fail_resize_at() {
  return static_cast<size_t>(onednn::switch_number("ET_CPU_TEST_FAIL_RESIZE_AT", 0, 0, 1 << 30));
}

// The test hook's failure: what a kernel oneDNN declines at the new sizes throws.
[[noreturn]] void fail_resize_for_test() {
  throw std::runtime_error("ET_CPU_TEST_FAIL_RESIZE_AT: this resize fails here (test hook)");
}

}  // namespace

OptimizedSession::OptimizedSession(const OptimizedSession* base, bool sizes_vary)
    : sizes_vary_(sizes_vary), fail_resize_at_(test_fail_resize_at()),
      weights_(base != nullptr                   ? base->weights_
               : onednn::weight_cache_enabled() ? std::make_shared<onednn::WeightCache>()
                                                : nullptr),
      shape_plan_(base != nullptr),
      hold_pool_(onednn::switch_reach("ET_CPU_POOL_HOLD")),
      wake_pool_(onednn::kernel_switched_on("ET_CPU_POOL_WAKE")) {
  provider_ = std::make_unique<onednn::Provider>(options());  // options() reads provider_
}

void OptimizedSession::call_started() {
  const bool hold = hold_pool_ == onednn::SwitchReach::kEverywhere ||
                    (hold_pool_ == onednn::SwitchReach::kDefault && last_call_us_ >= kHoldFromUs);
  held_ = hold ? provider_->work_pool() : nullptr;
  if (held_ != nullptr) {
    held_->hold();
  } else if (wake_pool_ && provider_->work_pool() != nullptr) {
    // A fresh Provider (finalize, resize) has its own plans: count again (a stale count would
    // only cost or skip one wake).
    if (split_provider_ != provider_.get()) {
      splits_ = split_count() > 0;
      split_provider_ = provider_.get();
    }
    if (splits_) provider_->work_pool()->wake();
  }
  call_start_ = std::chrono::steady_clock::now();
}

void OptimizedSession::call_finished() {
  if (held_ != nullptr) held_->release();
  held_ = nullptr;
  last_call_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - call_start_)
                      .count();
}

bool OptimizedSession::defers_prepare() const {
  return shape_plan_ && bound_in_base_ && onednn::kernel_switched_on("ET_CPU_SHAPE_PLAN_DEFER");
}

void OptimizedSession::add_checked(OptimizedKernel* kernel) {
  if (defers_prepare()) {
    add_unprepared(kernel);
    return;
  }
  kernel->prepare(*provider_, [](const executorch::aten::TensorImpl*) { return false; });
  add(kernel);
}

size_t OptimizedSession::held_bytes() const {
  size_t kernels = 0;
  for (const OptimizedKernel* kernel : kernels_) kernels += kernel->staging_bytes();
  size_t providers = 0;
  for (const onednn::Provider* p :
       {provider_.get(), fitting_provider_.get(), standing_in_provider_.get()}) {
    if (p != nullptr) providers += p->weights_bytes() + p->scratchpad_bytes() + p->staging_bytes();
  }
  return providers + kernels;
}

std::string OptimizedSession::summary() const {
  return "Optimized(oneDNN): " + std::to_string(kernels_.size()) + " kernels, " +
         std::to_string(chained_) + " activations kept channels-last, " +
         std::to_string(blocks_) + " inverted residual blocks fused, " +
         std::to_string(provider_->num_threads()) + " threads (" +
         (provider_->work_sharing() ? "work sharing, " + std::to_string(split_count()) +
                                          " ops split"
                                    : provider_->num_threads() == 1 ? std::string("no pool")
                                                                    : std::string("OpenMP")) +
         "), isa " + provider_->isa() + "; our own kernels: " +
         std::to_string(count_implementation("row_gemm")) + " row_gemm, " +
         std::to_string(count_containing("row_bmm")) + " row_bmm, " +
         std::to_string(count_implementation("tile_bmm")) + " tile_bmm, " +
         std::to_string(count_implementation("channel_binary")) + " channel_binary, " +
         std::to_string(count_implementation("flat_binary")) + " flat_binary, " +
         std::to_string(count_implementation("row_binary")) + " row_binary, " +
         std::to_string(count_implementation("permute")) + " permute (" +
         std::to_string(count_implementation("permute:runs")) + " as contiguous runs), " +
         std::to_string(count_implementation("softmax:avx512")) + " softmax, " +
         std::to_string(count_implementation("linear_8da:avx512_vnni")) +
         " linear_8da:avx512_vnni, " + std::to_string(count_implementation("linear_8da:avx2")) +
         " linear_8da:avx2, " + std::to_string(count_containing("depthwise:avx512")) +
         " depthwise (alone or in a block), " +
         std::to_string(count_containing("block pointwise:avx512")) + " block expands, " +
         std::to_string(count_containing("pixel pieces")) + " blocks in two phases, " +
         std::to_string(count_implementation("depthwise_int8:avx512_vnni")) +
         " depthwise_int8:avx512_vnni, " +
         std::to_string(count_implementation("pointwise_int8:avx512_vnni")) +
         " pointwise_int8:avx512_vnni, " + std::to_string(count_implementation("stem:avx512")) +
         " stem, " + std::to_string(count_implementation("squeeze_excite:avx512")) +
         " squeeze-excite tails, " +
         std::to_string(count_containing("(gate multiply fused)")) +
         " squeeze-excite gate multiplies fused, " +
         std::to_string(count_containing("(gate folded")) +
         " squeeze-excite gates folded into a convolution, " +
         std::to_string(count_implementation("pointwise_pixels:avx512")) +
         " gated 1x1 convolutions on pointwise_pixels, " +
         std::to_string(count_implementation("pointwise_by_pixels:avx512")) +
         " 1x1 convolutions by pixels, " +
         std::to_string(count_implementation("stream_conv:avx512")) + " stream_conv, " +
         std::to_string(count_implementation("winograd:avx512")) + " winograd 3x3, " +
         std::to_string(count_containing("(permute folded)")) +
         " products reading a permuted operand in place";
}

size_t OptimizedSession::count_containing(const std::string& part) const {
  return static_cast<size_t>(
      std::count_if(kernels_.begin(), kernels_.end(), [&](const OptimizedKernel* k) {
        return k->implementation().find(part) != std::string::npos;
      }));
}

size_t OptimizedSession::count_implementation(const std::string& prefix) const {
  return static_cast<size_t>(
      std::count_if(kernels_.begin(), kernels_.end(), [&](const OptimizedKernel* k) {
        return k->implementation().rfind(prefix, 0) == 0;
      }));
}

size_t OptimizedSession::split_count() const {
  return static_cast<size_t>(
      std::count_if(kernels_.begin(), kernels_.end(),
                    [](const OptimizedKernel* k) { return k->pieces() > 1; }));
}

Error OptimizedSession::finalize(
    const std::function<bool(const executorch::aten::TensorImpl*)>& read_outside) {
  std::unordered_set<const executorch::aten::TensorImpl*> plain;
  for (OptimizedKernel* kernel : kernels_) {
    for (const auto* tensor : kernel->plain_reads()) plain.insert(tensor);
  }
  std::unordered_set<const executorch::aten::TensorImpl*> chained;
  if (chaining_enabled()) {
    for (OptimizedKernel* kernel : kernels_) {
      const auto* out = kernel->chainable_output_after(chained);
      if (out != nullptr && !read_outside(out) && plain.count(out) == 0) chained.insert(out);
    }
  }
  // Nothing kept channels-last and every kernel prepared at bind: the bind-time plans are
  // already the plain-layout ones, and preparing them again would double the compile (most
  // of a new size's re-plan in a transformer, which has no convolutions to chain).
  if (chained.empty() && !unprepared_) {
    chained_ = 0;
    chained_set_.clear();
    return Error::Ok;
  }
  auto attempt = [&](const OptimizedKernel::InChannelsLast& channels_last) {
    for (OptimizedKernel* kernel : kernels_) kernel->drop_kept_plans();
    auto fresh = std::make_unique<onednn::Provider>(options());
    for (OptimizedKernel* kernel : kernels_) kernel->prepare(*fresh, channels_last);
    provider_ = std::move(fresh);
  };
  try {
    attempt([&](const executorch::aten::TensorImpl* t) { return chained.count(t) > 0; });
    chained_ = chained.size();
    chained_set_ = std::move(chained);
    return Error::Ok;
  } catch (const std::exception& e) {
    log_line(LogLevel::kInfo, "oneDNN layout chaining failed (%s); plain layouts", e.what());
  }
  try {
    attempt([](const executorch::aten::TensorImpl*) { return false; });
    chained_ = 0;
    chained_set_.clear();
    return Error::Ok;
  } catch (const std::exception& e) {
    log_line(LogLevel::kError, "oneDNN kernels could not be prepared again: %s", e.what());
    return Error::Internal;
  }
}

Error OptimizedSession::resize() {
  // A fresh Provider, as finalize's: the previous sizes' plans (and their scratchpad and staging
  // sizes) go with the old one. Weights come from the shared weight cache.
  // The layouts of the sizes before stay for the next change (a whole primitive's below 32 rows,
  // the row tiles' above, a RowGemm packing at one row), not made again at each.
  // Kernels whose plan fits every size (a CNN's, prepared for one image) keep theirs, and the
  // Provider state it holds: when all do, a new batch prepares nothing.
  if (weights_) weights_->keep_everything();
  ++resizes_;
  const bool test_fails = resizes_ == fail_resize_at_;
  try {
    const bool all_fit =
        std::all_of(kernels_.begin(), kernels_.end(),
                    [](const OptimizedKernel* k) { return k->plan_fits_every_size(); });
    if (all_fit && test_fails) fail_resize_for_test();
    if (all_fit) return Error::Ok;
    // A new size: plans may stand in for its first call (the graph calls prepare_standing_in
    // when it repeats).
    onednn::ProviderOptions resized = options();
    resized.first_call_stand_ins = true;
    std::unique_ptr<onednn::Provider> fresh = prepare_again(
        resized, [](const OptimizedKernel& k) { return !k.plan_fits_every_size(); }, test_fails);
    // The Provider the fitting kernels' plans were prepared on stays, for the memory report.
    const bool some_fit = std::any_of(kernels_.begin(), kernels_.end(), [](const auto* k) {
      return k->plan_fits_every_size();
    });
    if (some_fit && !fitting_provider_) fitting_provider_ = std::move(provider_);
    provider_ = std::move(fresh);
    standing_in_provider_.reset();
  } catch (const std::exception& e) {
    // Some kernels may hold plans of the discarded Provider: the caller prepares them again
    // (at the bounds) before any runs.
    log_line(LogLevel::kInfo, "oneDNN kernels cannot be resized in place: %s", e.what());
    return Error::NotSupported;
  }
  return Error::Ok;
}

bool OptimizedSession::faster_as_shape_plan() const {
  if (onednn::switch_reach("ET_CPU_CONV_PER_IMAGE") == onednn::SwitchReach::kEverywhere) {
    return false;
  }
  return std::any_of(kernels_.begin(), kernels_.end(),
                     [](const OptimizedKernel* k) { return k->runs_images_apart(); });
}

bool OptimizedSession::plans_stand_in() const {
  return std::any_of(kernels_.begin(), kernels_.end(),
                     [](const OptimizedKernel* k) { return k->stands_in(); });
}

Error OptimizedSession::prepare_standing_in() {
  // Not on the current Provider: a plan prepared there could grow the scratchpads the other
  // kernels' plans run with. Those keep theirs; the new plans keep this Provider's state alive.
  try {
    standing_in_provider_ = prepare_again(
        options(), [](const OptimizedKernel& k) { return k.stands_in(); }, false);
  } catch (const std::exception& e) {
    log_line(LogLevel::kInfo, "oneDNN kernels cannot be prepared again in place: %s", e.what());
    return Error::NotSupported;
  }
  return Error::Ok;
}

std::unique_ptr<onednn::Provider> OptimizedSession::prepare_again(
    const onednn::ProviderOptions& fresh_options,
    const std::function<bool(const OptimizedKernel&)>& which, bool test_fails) {
  auto fresh = std::make_unique<onednn::Provider>(fresh_options);
  for (size_t i = 0; i < kernels_.size(); ++i) {
    if (test_fails && i == kernels_.size() / 2) fail_resize_for_test();
    if (!which(*kernels_[i])) continue;
    kernels_[i]->prepare(*fresh, [this](const executorch::aten::TensorImpl* t) {
      return chained_set_.count(t) > 0;
    });
    ++resize_prepares;
  }
  return fresh;
}

onednn::ProviderOptions OptimizedSession::options() const {
  onednn::ProviderOptions options;
  options.num_threads = 0;  // the provider's default: ET_CPU_ONEDNN_THREADS, capped at the CPUs
  options.work_sharing = work_sharing_enabled();
  options.weight_cache = weights_;
  options.size_independent_plans = sizes_vary_;
  // Primitives a kernel keeps from one Provider to the next (a linear's row tile) run on either.
  options.same_engine = provider_.get();
  return options;
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin

// Kernels a resize in place prepared again over the process (the loader's
// resize_prepare_count): those whose plan does not fit every size.
extern "C" {

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_resize_prepares() {
  return et_cpu_plugin::cpu::optimized::resize_prepares.load();
}

}  // extern "C"
