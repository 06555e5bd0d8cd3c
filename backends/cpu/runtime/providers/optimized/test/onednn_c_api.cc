// The C ABI of onednn_c_api.h over the plans (onednn::Provider): handles, argument conversion,
// errors kept per thread for etdnn_last_error().
#include "backends/cpu/runtime/providers/optimized/test/onednn_c_api.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_provider.h"
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_int8.h"
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_int8.h"
#include "backends/cpu/runtime/providers/optimized/kernels/quantized_add.h"
#include "backends/cpu/runtime/providers/optimized/common/slices.h"
#include "backends/cpu/runtime/providers/optimized/common/weight_arena.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_activations.h"

namespace onednn = et_cpu_plugin::onednn;

struct etdnn_provider {
  onednn::Provider provider;
  explicit etdnn_provider(const onednn::ProviderOptions& options) : provider(options) {}
};

struct etdnn_plan {
  std::unique_ptr<onednn::ConvPlan> conv;
  std::unique_ptr<onednn::LinearPlan> linear;
  std::unique_ptr<onednn::MatmulPlan> matmul;
  std::unique_ptr<onednn::ReorderPlan> reorder;
  size_t output_bytes = 0;
  bool output_plain = true;
  bool output_channels_last = false;
  std::string description;
};

namespace {

thread_local std::string last_error;

void copy_out(const std::string& text, char* out, size_t size) {
  if (size == 0) {
    return;
  }
  const size_t n = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// Post-op kinds 3 to 7 (`alpha`: leaky relu's slope).
onednn::Activation activation_of_kind(int kind, float alpha = 0.0f) {
  using Kind = onednn::Activation::Kind;
  onednn::Activation activation;
  activation.kind = kind == 3   ? Kind::kSigmoid
                    : kind == 4 ? Kind::kSilu
                    : kind == 5 ? Kind::kHardswish
                    : kind == 6 ? Kind::kHardsigmoid
                                : Kind::kLeakyRelu;
  activation.alpha = alpha;
  return activation;
}

onednn::PostOps post_ops_from(const int* kinds, const float* mins, const float* maxs, int count) {
  onednn::PostOps ops;
  for (int i = 0; i < count; ++i) {
    switch (kinds[i]) {
      case 0:
        ops.push_back(onednn::PostOp::add());
        break;
      case 1:
        ops.push_back(onednn::PostOp::relu());
        break;
      case 2:
        ops.push_back(onednn::PostOp::clamp(mins[i], maxs[i]));
        break;
      case 3:
      case 4:
      case 5:
      case 6:
      case 7:
        ops.push_back(onednn::PostOp::act(activation_of_kind(kinds[i], mins[i])));
        break;
      default:
        throw onednn::ProviderError(
            "post_kinds[" + std::to_string(i) + "] = " + std::to_string(kinds[i]) +
            " is not 0 (add), 1 (relu), 2 (clamp), 3 (sigmoid), 4 (silu), 5 (hardswish), "
            "6 (hardsigmoid) or 7 (leaky relu)");
    }
  }
  return ops;
}

std::vector<int64_t> span(const int64_t* data, int count) {
  return std::vector<int64_t>(data, data + count);
}

template <typename Fn>
auto guarded(Fn&& fn, decltype(fn()) on_error) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return on_error;
}

}  // namespace

extern "C" {

const char* etdnn_last_error(void) {
  return last_error.c_str();
}

etdnn_provider* etdnn_provider_create(int num_threads) {
  return etdnn_provider_create_ex(num_threads, 1, -1);
}

etdnn_provider* etdnn_provider_create_ex(int num_threads, int work_sharing,
                                         int64_t min_task_flops) {
  onednn::ProviderOptions options;
  options.num_threads = num_threads;
  options.work_sharing = work_sharing != 0;
  options.min_task_flops = min_task_flops;
  return guarded([&] { return new etdnn_provider(options); }, nullptr);
}

etdnn_provider* etdnn_provider_create_sizes_vary(int num_threads) {
  onednn::ProviderOptions options;
  options.num_threads = num_threads;
  options.size_independent_plans = true;
  return guarded([&] { return new etdnn_provider(options); }, nullptr);
}

void etdnn_provider_destroy(etdnn_provider* provider) {
  delete provider;
}

int etdnn_provider_num_threads(const etdnn_provider* provider) {
  return provider->provider.num_threads();
}

int etdnn_provider_work_sharing(const etdnn_provider* provider) {
  return provider->provider.work_sharing() ? 1 : 0;
}

size_t etdnn_provider_weights_bytes(const etdnn_provider* provider) {
  return provider->provider.weights_bytes();
}

void etdnn_weight_arena_stats(size_t* slab_bytes, size_t* block_bytes) {
  const et_cpu_plugin::onednn::WeightArenaStats stats = et_cpu_plugin::onednn::weight_arena_stats();
  if (slab_bytes) *slab_bytes = stats.slab_bytes;
  if (block_bytes) *block_bytes = stats.block_bytes;
}

size_t etdnn_provider_scratchpad_bytes(const etdnn_provider* provider) {
  return provider->provider.scratchpad_bytes();
}

size_t etdnn_provider_staging_bytes(const etdnn_provider* provider) {
  return provider->provider.staging_bytes();
}

void etdnn_provider_isa(const etdnn_provider* provider, char* out, size_t size) {
  copy_out(provider->provider.isa(), out, size);
}

etdnn_plan* etdnn_conv_prepare(
    etdnn_provider* provider,
    int rank,
    const int64_t* geometry,
    const int64_t* input_size,
    const int64_t* kernel_size,
    const int64_t* stride,
    const int64_t* padding,
    const int64_t* dilation,
    const float* weight,
    const float* bias,
    const int* post_kinds,
    const float* post_mins,
    const float* post_maxs,
    int post_count,
    const etdnn_plan* input_from,
    int input_channels_last,
    int output_layout) {
  return guarded(
      [&]() -> etdnn_plan* {
        onednn::ConvParams params;
        params.batch = geometry[0];
        params.in_channels = geometry[1];
        params.out_channels = geometry[2];
        params.groups = geometry[3];
        params.input_size = span(input_size, rank);
        params.kernel_size = span(kernel_size, rank);
        params.stride = span(stride, rank);
        params.padding = span(padding, rank);
        params.dilation = span(dilation, rank);
        onednn::ConvLayouts layouts;
        if (input_from != nullptr) {
          if (!input_from->conv) {
            throw onednn::ProviderError("input_from is not a conv plan");
          }
          layouts.input = std::make_shared<onednn::Layout>(input_from->conv->output_layout());
        } else if (input_channels_last) {
          std::vector<int64_t> dims{params.batch, params.in_channels};
          dims.insert(dims.end(), params.input_size.begin(), params.input_size.end());
          layouts.input = std::make_shared<onednn::Layout>(onednn::Layout::channels_last(dims));
        }
        if (output_layout < 0 || output_layout > 2) {
          throw onednn::ProviderError(
              "output_layout " + std::to_string(output_layout) + " is not 0, 1 or 2");
        }
        layouts.output = static_cast<onednn::OutputLayout>(output_layout);
        auto plan = std::make_unique<etdnn_plan>();
        plan->conv = std::make_unique<onednn::ConvPlan>(provider->provider.prepare_conv(
            params,
            weight,
            bias,
            post_ops_from(post_kinds, post_mins, post_maxs, post_count),
            layouts));
        plan->output_bytes = plan->conv->output_layout().size_bytes();
        plan->output_plain = plan->conv->output_layout().is_plain();
        plan->output_channels_last = plan->conv->output_layout().is_channels_last();
        plan->description = plan->conv->implementation() + " | " +
            plan->conv->input_layout().describe() + " -> " +
            plan->conv->output_layout().describe();
        return plan.release();
      },
      nullptr);
}

etdnn_plan* etdnn_linear_prepare(
    etdnn_provider* provider,
    int64_t rows,
    int64_t in_features,
    int64_t out_features,
    int weight_is_k_by_n,
    const float* weight,
    const float* bias,
    const int* post_kinds,
    const float* post_mins,
    const float* post_maxs,
    int post_count) {
  return guarded(
      [&]() -> etdnn_plan* {
        onednn::LinearParams params{rows, in_features, out_features, weight_is_k_by_n != 0};
        auto plan = std::make_unique<etdnn_plan>();
        plan->linear = std::make_unique<onednn::LinearPlan>(provider->provider.prepare_linear(
            params, weight, bias, post_ops_from(post_kinds, post_mins, post_maxs, post_count)));
        plan->output_bytes = static_cast<size_t>(rows * out_features) * sizeof(float);
        plan->description = plan->linear->implementation();
        return plan.release();
      },
      nullptr);
}

etdnn_plan* etdnn_matmul_prepare(
    etdnn_provider* provider,
    int64_t batch,
    int64_t m,
    int64_t k,
    int64_t n,
    const int* post_kinds,
    const float* post_mins,
    const float* post_maxs,
    int post_count) {
  return guarded(
      [&]() -> etdnn_plan* {
        onednn::MatmulParams params{batch, m, k, n};
        auto plan = std::make_unique<etdnn_plan>();
        plan->matmul = std::make_unique<onednn::MatmulPlan>(provider->provider.prepare_matmul(
            params, post_ops_from(post_kinds, post_mins, post_maxs, post_count)));
        plan->output_bytes = static_cast<size_t>(batch * m * n) * sizeof(float);
        plan->description = plan->matmul->implementation();
        return plan.release();
      },
      nullptr);
}

etdnn_plan* etdnn_reorder_to_plain_prepare(etdnn_provider* provider, const etdnn_plan* conv) {
  return guarded(
      [&]() -> etdnn_plan* {
        if (conv == nullptr || !conv->conv) {
          throw onednn::ProviderError("etdnn_reorder_to_plain_prepare: not a conv plan");
        }
        const onednn::Layout& from = conv->conv->output_layout();
        const onednn::Layout to = onednn::Layout::plain(from.dims());
        auto plan = std::make_unique<etdnn_plan>();
        plan->reorder =
            std::make_unique<onednn::ReorderPlan>(provider->provider.prepare_reorder(from, to));
        plan->output_bytes = to.size_bytes();
        plan->description = "reorder | " + from.describe() + " -> " + to.describe();
        return plan.release();
      },
      nullptr);
}

int etdnn_plan_run(
    const etdnn_plan* plan, const float* a, const float* b, float* out, const float* residual) {
  return guarded(
      [&]() -> int {
        if (plan->conv) {
          plan->conv->run(a, out, residual);
        } else if (plan->linear) {
          plan->linear->run(a, out, residual);
        } else if (plan->matmul) {
          plan->matmul->run(a, b, out, residual);
        } else {
          plan->reorder->run(a, out);
        }
        return 0;
      },
      1);
}

double etdnn_plan_time(const etdnn_plan* plan, const float* a, const float* b, float* out,
                       const float* residual, int runs) {
  double best = -1.0;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (etdnn_plan_run(plan, a, b, out, residual) != 0) return -1.0;
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    if (best < 0.0 || ns < best) best = ns;
  }
  return best;
}

size_t etdnn_plan_output_bytes(const etdnn_plan* plan) {
  return plan->output_bytes;
}

int etdnn_plan_output_is_plain(const etdnn_plan* plan) {
  return plan->output_plain ? 1 : 0;
}

int etdnn_plan_output_is_channels_last(const etdnn_plan* plan) {
  return plan->output_channels_last ? 1 : 0;
}

etdnn_plan* etdnn_reorder_from_plain_prepare(etdnn_provider* provider, const etdnn_plan* conv) {
  return guarded(
      [&]() -> etdnn_plan* {
        if (conv == nullptr || !conv->conv) {
          throw onednn::ProviderError("etdnn_reorder_from_plain_prepare: not a conv plan");
        }
        const onednn::Layout& to = conv->conv->output_layout();
        const onednn::Layout from = onednn::Layout::plain(to.dims());
        auto plan = std::make_unique<etdnn_plan>();
        plan->reorder =
            std::make_unique<onednn::ReorderPlan>(provider->provider.prepare_reorder(from, to));
        plan->output_bytes = to.size_bytes();
        plan->output_plain = to.is_plain();
        plan->output_channels_last = to.is_channels_last();
        plan->description = "reorder | " + from.describe() + " -> " + to.describe();
        return plan.release();
      },
      nullptr);
}

int etdnn_plan_same_output_layout(const etdnn_plan* a, const etdnn_plan* b) {
  return a->conv && b->conv && a->conv->output_layout() == b->conv->output_layout() ? 1 : 0;
}

size_t etdnn_plan_weights_bytes(const etdnn_plan* plan) {
  if (plan->conv) {
    return plan->conv->weights_bytes();
  }
  return plan->linear ? plan->linear->weights_bytes() : 0;
}

size_t etdnn_plan_scratchpad_bytes(const etdnn_plan* plan) {
  if (plan->conv) {
    return plan->conv->scratchpad_bytes();
  }
  if (plan->linear) {
    return plan->linear->scratchpad_bytes();
  }
  return plan->matmul ? plan->matmul->scratchpad_bytes() : 0;
}

size_t etdnn_plan_pieces(const etdnn_plan* plan) {
  if (plan->conv) {
    return plan->conv->pieces();
  }
  if (plan->linear) {
    return plan->linear->pieces();
  }
  return plan->matmul ? plan->matmul->pieces() : 1;
}

void etdnn_plan_describe(const etdnn_plan* plan, char* out, size_t size) {
  copy_out(plan->description, out, size);
}

void etdnn_plan_destroy(etdnn_plan* plan) {
  delete plan;
}

int etdnn_has_vector_activation(int kind) {
  if (kind != 3 && kind != 4) return 0;
  return onednn::has_vector_activation(activation_of_kind(kind)) ? 1 : 0;
}

int etdnn_vector_activation(int kind, const float* input, float* output, size_t count) {
  return guarded(
      [&] {
        if (kind != 3 && kind != 4) {
          throw onednn::ProviderError("vector activation kind " + std::to_string(kind) +
                                      " is not 3 (sigmoid) or 4 (silu)");
        }
        onednn::apply_vector_activation(activation_of_kind(kind), input, output, count);
        return 0;
      },
      1);
}

// The int8 convolutions' `quant` array (see etdnn_depthwise_int8_run).
static onednn::DepthwiseInt8Quant int8_quant_of(const double* quant) {
  onednn::DepthwiseInt8Quant q;
  q.input_scale = static_cast<float>(quant[0]);
  q.input_zero_point = static_cast<int32_t>(quant[1]);
  q.output_scale = static_cast<float>(quant[2]);
  q.output_zero_point = static_cast<int32_t>(quant[3]);
  q.quant_min = static_cast<int32_t>(quant[4]);
  q.quant_max = static_cast<int32_t>(quant[5]);
  q.output_min = quant[6];
  q.output_max = quant[7];
  q.is_signed = quant[8] != 0.0;
  return q;
}

int etdnn_depthwise_int8_run(const int64_t* geometry, const double* quant, const int8_t* weight,
                             const float* weight_scales, const float* bias, const uint8_t* input,
                             uint8_t* output) {
  return guarded(
      [&] {
        onednn::DepthwiseShape s;
        s.channels = geometry[0];
        s.in_h = geometry[1];
        s.in_w = geometry[2];
        s.out_h = geometry[3];
        s.out_w = geometry[4];
        s.kernel_h = s.kernel_w = geometry[5];
        s.stride_h = geometry[6];
        s.stride_w = geometry[7];
        s.pad_top = geometry[8];
        s.pad_left = geometry[9];
        const onednn::DepthwiseInt8Quant q = int8_quant_of(quant);
        if (!onednn::depthwise_int8_supports(s, q)) return 2;
        onednn::DepthwiseInt8 conv(s, weight, weight_scales, bias, q);
        conv.run_rows(input, output, 0, s.out_h);
        return 0;
      },
      1);
}

int etdnn_pointwise_int8_run(const int64_t* shape, const double* quant, const int8_t* weight,
                             const float* weight_scales, const float* bias, const uint8_t* input,
                             uint8_t* output, int64_t pixels, int64_t pieces) {
  return guarded(
      [&] {
        const onednn::DepthwiseInt8Quant q = int8_quant_of(quant);
        if (!onednn::pointwise_int8_supports(shape[0], shape[1], q)) return 2;
        onednn::PointwiseInt8 conv(shape[0], shape[1], weight, weight_scales, bias, q);
        for (int64_t i = 0; i < pieces; ++i) {
          const auto [first, last] =
              onednn::block_slice(pixels, onednn::PointwiseInt8::kPixelBlock,
                                  static_cast<size_t>(pieces), static_cast<size_t>(i));
          conv.run(input, output, first, last);
        }
        return 0;
      },
      1);
}

int etdnn_pointwise_conv_run(const int64_t* shape, const float* weight, const float* bias,
                             const int* post_kinds, const float* post_mins,
                             const float* post_maxs, int post_count, const float* input,
                             float* output, int64_t pixels, int runs, double* best_ns) {
  return guarded(
      [&] {
        const onednn::PostOps post_ops =
            post_ops_from(post_kinds, post_mins, post_maxs, post_count);
        if (!onednn::pointwise_conv_supports(shape[0], shape[1], post_ops)) return 2;
        onednn::PointwiseConv conv(
            onednn::RowGemm::pack(shape[0], shape[1], weight, false, bias), post_ops);
        double best = -1.0;
        for (int i = 0; i < std::max(1, runs); ++i) {
          const auto start = std::chrono::steady_clock::now();
          conv.run(input, pixels, output);
          const double ns = std::chrono::duration<double, std::nano>(
                                std::chrono::steady_clock::now() - start)
                                .count();
          if (best < 0.0 || ns < best) best = ns;
        }
        if (best_ns) *best_ns = best;
        return 0;
      },
      1);
}

int etdnn_quantized_add_run(const double* quant, const uint8_t* a, const uint8_t* b,
                            uint8_t* output, int64_t count, int64_t pieces) {
  return guarded(
      [&] {
        if (!onednn::quantized_add_supported()) return 2;
        onednn::QuantizedAddParams p;
        p.a_scale = static_cast<float>(quant[0]);
        p.a_zero_point = static_cast<int32_t>(quant[1]);
        p.b_scale = static_cast<float>(quant[2]);
        p.b_zero_point = static_cast<int32_t>(quant[3]);
        p.out_scale = static_cast<float>(quant[4]);
        p.out_zero_point = static_cast<int32_t>(quant[5]);
        p.quant_min = static_cast<int32_t>(quant[6]);
        p.quant_max = static_cast<int32_t>(quant[7]);
        p.low = static_cast<float>(quant[8]);
        p.high = static_cast<float>(quant[9]);
        p.is_signed = quant[10] != 0.0;
        for (int64_t i = 0; i < pieces; ++i) {
          const auto [first, last] =
              onednn::block_slice(count, 64, static_cast<size_t>(pieces), static_cast<size_t>(i));
          onednn::quantized_add(p, a + first, b + first, output + first, last - first);
        }
        return 0;
      },
      1);
}

}  // extern "C"
