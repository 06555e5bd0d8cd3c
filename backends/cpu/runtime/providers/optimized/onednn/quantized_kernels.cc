// The int8 kernels (see quantized_kernels.h): argument parsing, the oneDNN int8 convolution,
// matmul and pooling with runtime scales and zero points, our own int8 add, their splits on the
// work pool, and check_quantized / bind_quantized.
#include "backends/cpu/runtime/providers/optimized/onednn/quantized_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_int8.h"
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_int8.h"
#include "backends/cpu/runtime/providers/optimized/kernels/quantize_convert.h"
#include "backends/cpu/runtime/providers/optimized/kernels/quantized_add.h"
#include "backends/cpu/runtime/providers/optimized/common/slices.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"

namespace et_cpu_plugin {
namespace cpu {

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;
using dnnl::memory;

constexpr char kConv[] = "et_cpu_quant::conv2d.out";
constexpr char kLinear[] = "et_cpu_quant::linear.out";
constexpr char kMaxPool[] = "et_cpu_quant::max_pool2d.out";
constexpr char kAdd[] = "et_cpu_quant::add.out";

// oneDNN's OpenMP team size for the int8 kernels: ET_CPU_ONEDNN_INT8_THREADS, default 1. The
// float plans split work over the provider's own pool and run oneDNN single-threaded; an OpenMP
// team beside that pool spins in its barriers on a shared machine (MobileNetV2 int8: 850 ms with
// 2 OpenMP threads at load 12 on 2 cores, 123 ms with 1). Splitting the int8 kernels over the
// pool is a follow-up.
int int8_threads() {
  return static_cast<int>(onednn::switch_number("ET_CPU_ONEDNN_INT8_THREADS", 1, 1, 1024));
}

// ET_CPU_ONEDNN_INT8_SPLIT=0 runs every int8 convolution and linear whole on the calling thread
// (A/B of the row / column bands on the work pool).
bool int8_split_enabled() {
  return onednn::kernel_switched_on("ET_CPU_ONEDNN_INT8_SPLIT");
}

// Sets the calling thread's OpenMP team size for one scope.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) {
    if (threads != saved_) omp_set_num_threads(threads);
    threads_ = threads;
  }
  ~OmpThreads() {
    if (threads_ != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
  int threads_;
};

// The scalars after the four tensor arguments (quantized_ops.py's schemas).
struct Quantization {
  float input_scale;
  int32_t input_zero_point;
  float output_scale;
  int32_t output_zero_point;
  int64_t quant_min;
  int64_t quant_max;
  double output_min;
  double output_max;
};

Quantization read_quantization(const OpBinding& op, size_t first) {
  auto arg = [&](size_t i) -> const EValue& { return *op.args[first + i]; };
  return Quantization{static_cast<float>(arg(0).toDouble()), static_cast<int32_t>(arg(1).toInt()),
                      static_cast<float>(arg(2).toDouble()), static_cast<int32_t>(arg(3).toInt()),
                      arg(4).toInt(),                        arg(5).toInt(),
                      arg(6).toDouble(),                     arg(7).toDouble()};
}

memory::dims dims_of(const Tensor& tensor) {
  memory::dims dims;
  for (ssize_t d = 0; d < tensor.dim(); ++d) dims.push_back(tensor.size(d));
  return dims;
}

memory::data_type data_type_of(ScalarType dtype) {
  return dtype == ScalarType::Byte ? memory::data_type::u8 : memory::data_type::s8;
}

// Everything the int8 kernels share: the engine and stream, the attributes, the scale / zero
// point memories, and the run (reorders between the plain tensors and the primitive's layouts).
class QuantizedKernel final : public BoundKernel {
 public:
  Error run(KernelRuntimeContext& context) override {
    OmpThreads threads(threads_);
    try {
      void* input = input_->mutable_data();
      void* output = output_->mutable_data();
      if (!src_slices_.empty()) {
        reorder_src_slices(static_cast<const char*>(input));
      } else if (src_reorder_) {
        memory user(user_src_md_, engine_, input);
        src_reorder_.execute(stream_, user, src_);
      } else {
        src_.set_data_handle(input);
      }
      if (!dst_reorder_) dst_.set_data_handle(output);
      if (bands_.empty()) {
        primitive_.execute(stream_, args_);
      } else {
        run_bands();
      }
      if (dst_reorder_) {
        memory user(user_dst_md_, engine_, output);
        dst_reorder_.execute(stream_, dst_, user);
      }
      stream_.wait();
    } catch (const dnnl::error&) {
      context.fail(Error::Internal);
      return Error::Internal;
    }
    return Error::Ok;
  }

  // Builds the kernel around a primitive descriptor chosen by `make_pd` from the attributes;
  // with `validate_only`, only the descriptor (oneDNN's yes or no) and null.
  template <typename MakePd>
  static std::unique_ptr<QuantizedKernel> make(const OpBinding& op, const Quantization& q,
                                               int weight_scale_mask, const memory::desc& user_src,
                                               const memory::desc& user_weights,
                                               const memory::desc& user_dst, MakePd make_pd,
                                               bool validate_only) {
    std::unique_ptr<QuantizedKernel> kernel(new QuantizedKernel());
    QuantizedKernel& k = *kernel;
    dnnl::primitive_attr attr;
    attr.set_scales_mask(DNNL_ARG_SRC, 0);
    attr.set_scales_mask(DNNL_ARG_WEIGHTS, weight_scale_mask);
    attr.set_scales_mask(DNNL_ARG_DST, 0);
    if (q.input_zero_point != 0) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    if (q.output_zero_point != 0) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
    // The clamp applies to the float result, before the output scale (oneDNN's post-op order).
    const bool low = std::isfinite(q.output_min), high = std::isfinite(q.output_max);
    if (low || high) {
      dnnl::post_ops post_ops;
      if (low && q.output_min == 0.0 && !high) {
        post_ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      } else {
        post_ops.append_eltwise(dnnl::algorithm::eltwise_clip_v2,
                                low ? static_cast<float>(q.output_min) : -FLT_MAX,
                                high ? static_cast<float>(q.output_max) : FLT_MAX);
      }
      attr.set_post_ops(post_ops);
    }
    auto pd = make_pd(k.engine_, attr);
    if (validate_only) return nullptr;
    k.attr_ = attr;
    k.implementation_ = pd.impl_info_str();
    k.primitive_ = dnnl::primitive(pd);
    k.input_ = op.args[0]->toTensor().unsafeGetTensorImpl();
    k.output_ = op.args[op.args.size() - 2]->toTensor().unsafeGetTensorImpl();
    k.user_src_md_ = user_src;
    k.user_dst_md_ = user_dst;
    k.src_ = memory(pd.src_desc(), k.engine_, DNNL_MEMORY_NONE);
    if (pd.src_desc() != user_src) {
      k.src_ = memory(pd.src_desc(), k.engine_);
      k.src_reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(k.engine_, user_src, k.engine_,
                                                                   pd.src_desc()));
    }
    k.dst_ = memory(pd.dst_desc(), k.engine_, DNNL_MEMORY_NONE);
    if (pd.dst_desc() != user_dst) {
      k.dst_ = memory(pd.dst_desc(), k.engine_);
      k.dst_reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(k.engine_, pd.dst_desc(),
                                                                   k.engine_, user_dst));
    }
    // Weights (a constant) once into the primitive's layout; the reorder also computes the
    // compensation oneDNN's s8 kernels keep beside them.
    const Tensor& weight = op.args[1]->toTensor();
    memory user_weights_mem(user_weights, k.engine_, const_cast<void*>(weight.const_data_ptr()));
    k.weights_ = memory(pd.weights_desc(), k.engine_);
    dnnl::reorder(user_weights_mem, k.weights_).execute(k.stream_, user_weights_mem, k.weights_);
    k.stream_.wait();

    k.args_[DNNL_ARG_SRC] = k.src_;
    k.args_[DNNL_ARG_WEIGHTS] = k.weights_;
    k.args_[DNNL_ARG_DST] = k.dst_;
    if (op.args[3]->isTensor()) {
      const Tensor& bias = op.args[3]->toTensor();
      memory::desc bias_md({bias.size(0)}, memory::data_type::f32, memory::format_tag::a);
      k.args_[DNNL_ARG_BIAS] =
          memory(bias_md, k.engine_, const_cast<void*>(bias.const_data_ptr()));
    }
    const Tensor& scales = op.args[2]->toTensor();
    memory::desc scales_md({scales.size(0)}, memory::data_type::f32, memory::format_tag::a);
    k.args_[DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS] =
        memory(scales_md, k.engine_, const_cast<void*>(scales.const_data_ptr()));
    k.scalars_f_[0] = q.input_scale;
    k.scalars_f_[1] = q.output_scale;
    k.scalars_i_[0] = q.input_zero_point;
    k.scalars_i_[1] = q.output_zero_point;
    memory::desc one_f({1}, memory::data_type::f32, memory::format_tag::a);
    memory::desc one_i({1}, memory::data_type::s32, memory::format_tag::a);
    k.args_[DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC] = memory(one_f, k.engine_, &k.scalars_f_[0]);
    k.args_[DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST] = memory(one_f, k.engine_, &k.scalars_f_[1]);
    if (q.input_zero_point != 0) {
      k.args_[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] =
          memory(one_i, k.engine_, &k.scalars_i_[0]);
    }
    if (q.output_zero_point != 0) {
      k.args_[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] =
          memory(one_i, k.engine_, &k.scalars_i_[1]);
    }
    return kernel;
  }

  const dnnl::engine& engine() const { return engine_; }
  const dnnl::primitive_attr& attr() const { return attr_; }
  memory::desc src_desc() const { return src_.get_desc(); }
  memory::desc weights_desc() const { return weights_.get_desc(); }
  const std::string& implementation() const { return implementation_; }
  memory::desc dst_desc() const { return dst_.get_desc(); }

  // Adds a band: `pd` computes a slice of the op reading and writing the whole op's src / dst
  // buffers at these byte offsets, with the op's arguments except those in `own` (a column
  // band's weights, bias and scales); without `own`, pd takes the weights in their bound layout.
  // `dst_stride` > 0: pd writes a dense block of rows of that many bytes each into a buffer of
  // the band's own, copied to the op's output rows `dst_stride` bytes apart (a column band:
  // oneDNN's int8 brgemm matmul refuses a strided output, and its jit GEMM is 1.7x slower).
  void add_band(const dnnl::primitive_desc& pd, size_t src_offset, size_t dst_offset,
                const std::unordered_map<int, memory>& own = {}, size_t dst_stride = 0) {
    Band band{dnnl::primitive(pd), args_, src_offset, dst_offset, dst_stride};
    for (const auto& [arg, value] : own) band.args[arg] = value;
    band.args[DNNL_ARG_SRC] = memory(pd.src_desc(0), engine_, DNNL_MEMORY_NONE);
    band.args[DNNL_ARG_DST] = dst_stride > 0 ? memory(pd.dst_desc(0), engine_)
                                             : memory(pd.dst_desc(0), engine_, DNNL_MEMORY_NONE);
    bands_.push_back(std::move(band));
  }
  // Reorders the op's weights (torch's, as `user`) into `desc` once, replacing the bound copy:
  // the layout the row bands chose, when they all chose one the whole op did not (its primitive
  // then never runs, so nothing reads the old copy).
  void relay_weights(const memory::desc& user, const void* data, const memory::desc& desc) {
    memory user_mem(user, engine_, const_cast<void*>(data));
    memory weights(desc, engine_);
    dnnl::reorder(user_mem, weights).execute(stream_, user_mem, weights);
    stream_.wait();
    weights_ = weights;
    args_[DNNL_ARG_WEIGHTS] = weights_;
  }
  // Frees the whole op's weights once every band owns its block of them (column bands).
  void release_whole_weights() {
    if (bands_.empty()) return;
    args_.erase(DNNL_ARG_WEIGHTS);
    weights_ = memory();
  }
  size_t band_count() const { return bands_.size(); }
  // Runs the bands added on `pool` (one stream per pool thread), or, with `pool` null, drops them.
  void use_bands(onednn::WorkPool* pool) {
    pool_ = pool;
    if (pool == nullptr) {
      bands_.clear();
      src_slices_.clear();
      return;
    }
    for (int i = 0; i < pool->size(); ++i) streams_.emplace_back(engine_);
    slice_src_reorder(pool);
  }

 private:
  QuantizedKernel() = default;

  struct Band {
    dnnl::primitive primitive;
    std::unordered_map<int, memory> args;
    size_t src_offset;
    size_t dst_offset;
    size_t dst_stride;  // 0: pd writes the op's output in place; else see add_band
  };

  // A plain (NCHW) input reordered to the bands' NHWC in slices of rows on the pool, before the
  // bands run (a stem's 224x224x3 input: one reorder took a tenth of MobileNetV2 int8's stem);
  // ET_CPU_ONEDNN_INT8_SLICED_REORDER=0: one reorder on the calling thread.
  struct SrcSlice {
    dnnl::reorder reorder;
    memory from, to;  // views of the user input / src_ rows, handles set per run
    size_t from_offset, to_offset;
  };
  void slice_src_reorder(onednn::WorkPool* pool) {
    src_slices_.clear();
    if (!src_reorder_ || !onednn::kernel_switched_on("ET_CPU_ONEDNN_INT8_SLICED_REORDER")) return;
    const memory::dims dims = user_src_md_.get_dims();
    if (dims.size() != 4 || dims[0] != 1 ||
        user_src_md_ !=
            memory::desc(dims, user_src_md_.get_data_type(), memory::format_tag::nchw) ||
        src_.get_desc() != memory::desc(dims, user_src_md_.get_data_type(),
                                        memory::format_tag::nhwc)) {
      return;
    }
    const int64_t channels = dims[1], height = dims[2], width = dims[3];
    const int64_t slices = std::min<int64_t>(height, 2 * pool->size());
    if (slices < 2) return;
    const memory::data_type dt = user_src_md_.get_data_type();
    std::vector<SrcSlice> built;
    for (int64_t i = 0; i < slices; ++i) {
      const auto [first, last] = onednn::slice_of(height, static_cast<size_t>(slices),
                                                  static_cast<size_t>(i));
      const memory::dims part{1, channels, last - first, width};
      memory::desc from(part, dt,
                        memory::dims{channels * height * width, height * width, width, 1});
      memory::desc to(part, dt,
                      memory::dims{height * width * channels, 1, width * channels, channels});
      SrcSlice slice{dnnl::reorder(dnnl::reorder::primitive_desc(engine_, from, engine_, to)),
                     memory(from, engine_, DNNL_MEMORY_NONE),
                     memory(to, engine_, DNNL_MEMORY_NONE), static_cast<size_t>(first * width),
                     static_cast<size_t>(first * width * channels)};
      built.push_back(std::move(slice));
    }
    src_slices_ = std::move(built);
  }
  void reorder_src_slices(const char* input) {
    char* staged = static_cast<char*>(src_.get_data_handle());
    pool_->run(src_slices_.size(), [&](size_t task, int worker) {
      SrcSlice& slice = src_slices_[task];
      slice.from.set_data_handle(const_cast<char*>(input) + slice.from_offset);
      slice.to.set_data_handle(staged + slice.to_offset);
      dnnl::stream& stream = streams_[static_cast<size_t>(worker)];
      slice.reorder.execute(stream, slice.from, slice.to);
      stream.wait();
    });
  }

  void run_bands() {
    char* src = static_cast<char*>(src_.get_data_handle());
    char* dst = static_cast<char*>(dst_.get_data_handle());
    pool_->run(bands_.size(), [&](size_t task, int worker) {
      Band& band = bands_[task];
      band.args[DNNL_ARG_SRC].set_data_handle(src + band.src_offset);
      memory& out = band.args[DNNL_ARG_DST];
      if (band.dst_stride == 0) out.set_data_handle(dst + band.dst_offset);
      dnnl::stream& stream = streams_[static_cast<size_t>(worker)];
      band.primitive.execute(stream, band.args);
      stream.wait();
      if (band.dst_stride == 0) return;
      const memory::dims dims = out.get_desc().get_dims();
      const size_t width = static_cast<size_t>(dims[1]);
      const char* block = static_cast<const char*>(out.get_data_handle());
      for (int64_t r = 0; r < dims[0]; ++r) {
        std::memcpy(dst + band.dst_offset + static_cast<size_t>(r) * band.dst_stride,
                    block + static_cast<size_t>(r) * width, width);
      }
    });
  }

  const int threads_ = int8_threads();

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::primitive primitive_;
  dnnl::primitive_attr attr_;
  std::string implementation_;  // oneDNN's, of the whole op
  std::unordered_map<int, memory> args_;
  std::vector<Band> bands_;  // empty: the op runs whole
  std::vector<SrcSlice> src_slices_;  // empty: src_reorder_ whole (or no reorder)
  std::vector<dnnl::stream> streams_;
  onednn::WorkPool* pool_ = nullptr;
  memory src_, dst_, weights_;
  memory::desc user_src_md_, user_dst_md_;
  dnnl::reorder src_reorder_, dst_reorder_;
  executorch::aten::TensorImpl* input_ = nullptr;
  executorch::aten::TensorImpl* output_ = nullptr;
  // Scales (input, output) and zero points (input, output) the attribute memories point at.
  float scalars_f_[2] = {1.f, 1.f};
  int32_t scalars_i_[2] = {0, 0};
};

// Splits a batch-1 convolution whose primitive reads and writes NHWC into bands of output rows
// for `pool` (two per pool thread, so a descheduled thread delays little): in NHWC a band's
// output rows and the input rows it reads are contiguous, so each band is a convolution of its
// own over a slice of the same buffers, padded only at the image's edges. Every band reads the
// op's weights as bound (asked for in that layout when its own choice differs) and runs the
// op's oneDNN implementation, else the op stays whole: no second copy of the weights and no
// band on a slower kernel. When every band's own choice is one layout other than the bound one
// and the bound one would put the bands on oneDNN's reference kernel (MobileNetV2's 1x1
// convolutions at 14x14: a band of 3-4 rows wants another weight blocking than the whole op),
// the weights are laid out the bands' way instead (ET_CPU_ONEDNN_INT8_BAND_WEIGHTS=0: not).
void split_rows(QuantizedKernel& kernel, onednn::WorkPool* pool, const memory::dims& src_dims,
                const memory::dims& dst_dims, const memory::dims& w_dims, memory::data_type act,
                const memory::desc& bias_md, const memory::dims& strides,
                const memory::dims& dilations, const memory::dims& pads,
                const memory::desc& user_w, const void* weight) {
  using tag = memory::format_tag;
  if (pool == nullptr || pool->size() < 2 || !int8_split_enabled() || src_dims[0] != 1) return;
  if (kernel.src_desc() != memory::desc(src_dims, act, tag::nhwc) ||
      kernel.dst_desc() != memory::desc(dst_dims, act, tag::nhwc)) {
    return;
  }
  const int64_t channels = src_dims[1], height = src_dims[2], width = src_dims[3];
  const int64_t out_channels = dst_dims[1], out_rows = dst_dims[2], out_width = dst_dims[3];
  // Rows a window spans beyond its first (oneDNN's dilation counts from 0).
  const int64_t window = (dilations[0] + 1) * (w_dims[w_dims.size() - 2] - 1);
  const int64_t bands = std::min<int64_t>(out_rows, 2 * pool->size());
  if (bands < 2) return;
  memory::desc any_w(w_dims, memory::data_type::s8, tag::any);
  const memory::desc bound_w = kernel.weights_desc();
  struct BandPlan {
    dnnl::convolution_forward::primitive_desc own;  // with the weights in its own choice
    size_t src_offset, dst_offset;
  };
  std::vector<BandPlan> plans;
  bool own_layout = onednn::kernel_switched_on("ET_CPU_ONEDNN_INT8_BAND_WEIGHTS");
  for (int64_t b = 0; b < bands; ++b) {
    const auto [first, last] = onednn::slice_of(out_rows, static_cast<size_t>(bands),
                                                static_cast<size_t>(b));
    // Input rows [low, high] the band's window covers, some of them padding.
    const int64_t low = first * strides[0] - pads[0];
    const int64_t high = (last - 1) * strides[0] - pads[0] + window;
    const int64_t begin = std::max<int64_t>(low, 0), end = std::min<int64_t>(high, height - 1);
    if (end < begin) return kernel.use_bands(nullptr);  // a band of padding only: keep it whole
    memory::desc src({1, channels, end - begin + 1, width}, act, tag::nhwc);
    memory::desc dst({1, out_channels, last - first, out_width}, act, tag::nhwc);
    auto make = [&](const memory::desc& weights) {
      return dnnl::convolution_forward::primitive_desc(
          kernel.engine(), dnnl::prop_kind::forward_inference,
          dnnl::algorithm::convolution_direct, src, weights, bias_md, dst, strides, dilations,
          {begin - low, pads[1]}, {high - end, pads[1]}, kernel.attr(), /*allow_empty=*/true);
    };
    auto pd = make(any_w);
    const size_t src_offset = static_cast<size_t>(begin * width * channels);
    const size_t dst_offset = static_cast<size_t>(first * out_width * out_channels);
    if (own_layout) {
      own_layout = pd && pd.impl_info_str() == kernel.implementation() &&
                   (plans.empty() || pd.weights_desc() == plans.front().own.weights_desc());
      if (own_layout) plans.push_back({pd, src_offset, dst_offset});
    }
    if (pd && pd.weights_desc() != bound_w) pd = make(bound_w);
    if (!pd || pd.weights_desc() != bound_w || pd.impl_info_str() != kernel.implementation()) {
      if (own_layout) continue;  // the bands' own layout may still do
      return kernel.use_bands(nullptr);
    }
    kernel.add_band(pd, src_offset, dst_offset);
  }
  if (static_cast<int64_t>(plans.size()) == bands &&
      static_cast<int64_t>(kernel.band_count()) < bands && weight != nullptr) {
    // Some band would run on another kernel with the bound weights: every band on its own
    // choice, the weights laid out that way once.
    kernel.use_bands(nullptr);
    kernel.relay_weights(user_w, weight, plans.front().own.weights_desc());
    for (const BandPlan& plan : plans) kernel.add_band(plan.own, plan.src_offset, plan.dst_offset);
  }
  if (static_cast<int64_t>(kernel.band_count()) < bands) return kernel.use_bands(nullptr);
  kernel.use_bands(pool);
}

// An int8 depthwise convolution on our own kernel (kernels/depthwise_int8.h), channels-last in
// and out: each image's output rows in bands on the pool (two per pool thread, as split_rows), or
// whole on the calling thread without a pool or with ET_CPU_ONEDNN_INT8_SPLIT=0.
class DepthwiseInt8Kernel final : public BoundKernel {
 public:
  DepthwiseInt8Kernel(const OpBinding& op, const onednn::DepthwiseShape& shape,
                      const onednn::DepthwiseInt8Quant& quant, onednn::WorkPool* pool)
      : conv_(shape, op.args[1]->toTensor().const_data_ptr<int8_t>(),
              op.args[2]->toTensor().const_data_ptr<float>(),
              op.args[3]->isTensor() ? op.args[3]->toTensor().const_data_ptr<float>() : nullptr,
              quant) {
    const Tensor& input = op.args[0]->toTensor();
    input_ = input.unsafeGetTensorImpl();
    output_ = op.args[op.args.size() - 2]->toTensor().unsafeGetTensorImpl();
    images_ = input.size(0);
    in_image_ = shape.channels * shape.in_h * shape.in_w;
    out_image_ = shape.channels * shape.out_h * shape.out_w;
    if (pool != nullptr && pool->size() >= 2 && int8_split_enabled()) {
      pool_ = pool;
      bands_ = std::min<int64_t>(shape.out_h, 2 * pool->size());
    }
  }

  Error run(KernelRuntimeContext& /*context*/) override {
    const auto* in = static_cast<const uint8_t*>(input_->data());
    auto* out = static_cast<uint8_t*>(output_->mutable_data());
    const int64_t rows = conv_.shape().out_h;
    if (pool_ == nullptr) {
      for (int64_t n = 0; n < images_; ++n) {
        conv_.run_rows(in + n * in_image_, out + n * out_image_, 0, rows);
      }
      return Error::Ok;
    }
    pool_->run(static_cast<size_t>(images_ * bands_), [&](size_t task, int) {
      const int64_t n = static_cast<int64_t>(task) / bands_;
      const auto [first, last] = onednn::slice_of(rows, static_cast<size_t>(bands_),
                                                  task % static_cast<size_t>(bands_));
      conv_.run_rows(in + n * in_image_, out + n * out_image_, first, last);
    });
    return Error::Ok;
  }

 private:
  onednn::DepthwiseInt8 conv_;
  executorch::aten::TensorImpl* input_ = nullptr;
  executorch::aten::TensorImpl* output_ = nullptr;
  onednn::WorkPool* pool_ = nullptr;  // null: every row on the calling thread
  int64_t bands_ = 1;
  int64_t images_ = 1;
  int64_t in_image_ = 0;
  int64_t out_image_ = 0;
};

// An int8 1x1 convolution (stride 1, no padding, groups 1) on our own kernel
// (kernels/pointwise_int8.h), channels-last in and out: the pixels of all images in slices on
// the pool (two per pool thread), or whole on the calling thread without a pool or with
// ET_CPU_ONEDNN_INT8_SPLIT=0.
class PointwiseInt8Kernel final : public BoundKernel {
 public:
  PointwiseInt8Kernel(const OpBinding& op, int64_t in_channels, int64_t out_channels,
                      const onednn::DepthwiseInt8Quant& quant, onednn::WorkPool* pool)
      : conv_(in_channels, out_channels, op.args[1]->toTensor().const_data_ptr<int8_t>(),
              op.args[2]->toTensor().const_data_ptr<float>(),
              op.args[3]->isTensor() ? op.args[3]->toTensor().const_data_ptr<float>() : nullptr,
              quant) {
    const Tensor& input = op.args[0]->toTensor();
    input_ = input.unsafeGetTensorImpl();
    output_ = op.args[op.args.size() - 2]->toTensor().unsafeGetTensorImpl();
    pixels_ = input.numel() / in_channels;
    if (pool != nullptr && pool->size() >= 2 && int8_split_enabled() && pixels_ >= 64) {
      pool_ = pool;
      slices_ = std::min<int64_t>(pixels_ / 32, 2 * pool->size());
    }
  }

  Error run(KernelRuntimeContext& /*context*/) override {
    const auto* in = static_cast<const uint8_t*>(input_->data());
    auto* out = static_cast<uint8_t*>(output_->mutable_data());
    if (pool_ == nullptr) {
      conv_.run(in, out, 0, pixels_);
      return Error::Ok;
    }
    pool_->run(static_cast<size_t>(slices_), [&](size_t task, int) {
      // Slices of whole pixel blocks (the kernel's), the last one takes the rest.
      const auto [first, last] = onednn::block_slice(
          pixels_, onednn::PointwiseInt8::kPixelBlock, static_cast<size_t>(slices_), task);
      conv_.run(in, out, first, last);
    });
    return Error::Ok;
  }

 private:
  onednn::PointwiseInt8 conv_;
  executorch::aten::TensorImpl* input_ = nullptr;
  executorch::aten::TensorImpl* output_ = nullptr;
  onednn::WorkPool* pool_ = nullptr;  // null: every pixel on the calling thread
  int64_t slices_ = 1;
  int64_t pixels_ = 0;
};

onednn::DepthwiseInt8Quant int8_quant_of(const OpBinding& op) {
  const Quantization q = read_quantization(op, 8);
  onednn::DepthwiseInt8Quant quant;
  quant.input_scale = q.input_scale;
  quant.input_zero_point = q.input_zero_point;
  quant.output_scale = q.output_scale;
  quant.output_zero_point = q.output_zero_point;
  quant.quant_min = static_cast<int32_t>(q.quant_min);
  quant.quant_max = static_cast<int32_t>(q.quant_max);
  quant.output_min = q.output_min;
  quant.output_max = q.output_max;
  quant.is_signed = op.args[0]->toTensor().scalar_type() == ScalarType::Char;
  return quant;
}

// Whether our 1x1 kernel takes `op`: a 4-D 1x1 convolution, stride 1, padding 0, dilation 1,
// groups 1, channels-last input and output, and pointwise_int8_supports.
bool own_pointwise_int8(const OpBinding& op, bool input_channels_last, bool output_channels_last,
                        onednn::DepthwiseInt8Quant* quant) {
  const Tensor& input = op.args[0]->toTensor();
  const Tensor& weight = op.args[1]->toTensor();
  if (!input_channels_last || !output_channels_last || input.dim() != 4 || weight.dim() != 4 ||
      op.args[7]->toInt() != 1 || weight.size(2) != 1 || weight.size(3) != 1 ||
      weight.size(1) != input.size(1)) {
    return false;
  }
  const auto stride = op.args[4]->toIntList();
  const auto padding = op.args[5]->toIntList();
  const auto dilation = op.args[6]->toIntList();
  for (size_t d = 0; d < 2; ++d) {
    if (stride[d] != 1 || padding[d] != 0 || dilation[d] != 1) return false;
  }
  *quant = int8_quant_of(op);
  return onednn::pointwise_int8_supports(weight.size(1), weight.size(0), *quant);
}

// The int8 depthwise convolution's shape and quantization when our kernel takes `op`: groups ==
// input channels == output channels, one filter each, dilation 1, channels-last input and
// output, and depthwise_int8_supports.
bool own_depthwise_int8(const OpBinding& op, bool input_channels_last, bool output_channels_last,
                        onednn::DepthwiseShape* shape, onednn::DepthwiseInt8Quant* quant) {
  const Tensor& input = op.args[0]->toTensor();
  const Tensor& weight = op.args[1]->toTensor();
  const Tensor& output = op.args[op.args.size() - 2]->toTensor();
  const int64_t groups = op.args[7]->toInt();
  if (!input_channels_last || !output_channels_last || input.dim() != 4 || weight.dim() != 4 ||
      groups < 2 || input.size(1) != groups || weight.size(0) != groups || weight.size(1) != 1 ||
      output.size(1) != groups) {
    return false;
  }
  const auto stride = op.args[4]->toIntList();
  const auto padding = op.args[5]->toIntList();
  const auto dilation = op.args[6]->toIntList();
  if (dilation[0] != 1 || dilation[1] != 1) return false;
  onednn::DepthwiseShape& s = *shape;
  s.channels = groups;
  s.in_h = input.size(2);
  s.in_w = input.size(3);
  s.out_h = output.size(2);
  s.out_w = output.size(3);
  s.kernel_h = weight.size(2);
  s.kernel_w = weight.size(3);
  s.stride_h = stride[0];
  s.stride_w = stride[1];
  s.pad_top = padding[0];
  s.pad_left = padding[1];
  // torch's output size with this padding on both sides (the kernel pads the far sides as the
  // output size implies).
  if (s.out_h != (s.in_h + 2 * s.pad_top - s.kernel_h) / s.stride_h + 1 ||
      s.out_w != (s.in_w + 2 * s.pad_left - s.kernel_w) / s.stride_w + 1) {
    return false;
  }
  *quant = int8_quant_of(op);
  return onednn::depthwise_int8_supports(s, *quant);
}

Error bind_conv(const OpBinding& op, std::unique_ptr<BoundKernel>* out, std::string* reason,
                bool input_channels_last, bool output_channels_last, onednn::WorkPool* pool,
                bool validate_only) {
  onednn::DepthwiseShape depthwise;
  onednn::DepthwiseInt8Quant depthwise_quant;
  if (own_depthwise_int8(op, input_channels_last, output_channels_last, &depthwise,
                         &depthwise_quant)) {
    if (validate_only) return Error::Ok;
    try {
      *out = std::make_unique<DepthwiseInt8Kernel>(op, depthwise, depthwise_quant, pool);
      return Error::Ok;
    } catch (const onednn::ProviderError&) {
      // fall through to oneDNN
    }
  }
  onednn::DepthwiseInt8Quant pointwise_quant;
  if (own_pointwise_int8(op, input_channels_last, output_channels_last, &pointwise_quant)) {
    if (validate_only) return Error::Ok;
    try {
      const Tensor& w = op.args[1]->toTensor();
      *out = std::make_unique<PointwiseInt8Kernel>(op, w.size(1), w.size(0), pointwise_quant,
                                                   pool);
      return Error::Ok;
    } catch (const onednn::ProviderError&) {
      // fall through to oneDNN
    }
  }
  const Tensor& input = op.args[0]->toTensor();
  const Tensor& weight = op.args[1]->toTensor();
  const Tensor& output = op.args[op.args.size() - 2]->toTensor();
  const auto stride = op.args[4]->toIntList();
  const auto padding = op.args[5]->toIntList();
  const auto dilation = op.args[6]->toIntList();
  const int64_t groups = op.args[7]->toInt();
  const Quantization q = read_quantization(op, 8);
  const memory::data_type act = data_type_of(input.scalar_type());
  memory::dims src_dims = dims_of(input), dst_dims = dims_of(output), w_dims = dims_of(weight);
  memory::dims user_w_dims = w_dims;
  memory::format_tag w_tag = memory::format_tag::oihw;
  int mask = 1 << 0;
  if (groups > 1) {  // {G, O/G, I/G, KH, KW}; a scale per (group, output channel)
    user_w_dims = {groups, w_dims[0] / groups, w_dims[1], w_dims[2], w_dims[3]};
    w_tag = memory::format_tag::goihw;
    mask = (1 << 0) | (1 << 1);
  }
  // oneDNN counts dilation from 0 (torch from 1).
  memory::dims strides{stride[0], stride[1]}, pads{padding[0], padding[1]},
      dilations{dilation[0] - 1, dilation[1] - 1};
  // oneDNN's int8 convolutions run on NHWC: a chained buffer already is, so no reorder.
  memory::desc user_src(src_dims, act,
                        input_channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw);
  memory::desc user_dst(dst_dims, act,
                        output_channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw);
  memory::desc user_w(user_w_dims, memory::data_type::s8, w_tag);
  const bool has_bias = op.args[3]->isTensor();
  const memory::desc bias_md =
      has_bias ? memory::desc({w_dims[0]}, memory::data_type::f32, memory::format_tag::a)
               : memory::desc();
  auto make_pd = [&](const dnnl::engine& engine, const dnnl::primitive_attr& attr) {
    memory::desc any_src(src_dims, act, memory::format_tag::any);
    memory::desc any_dst(dst_dims, act, memory::format_tag::any);
    memory::desc any_w(user_w_dims, memory::data_type::s8, memory::format_tag::any);
    return dnnl::convolution_forward::primitive_desc(
        engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, any_src,
        any_w, bias_md, any_dst, strides, dilations, pads, pads, attr);
  };
  try {
    auto kernel =
        QuantizedKernel::make(op, q, mask, user_src, user_w, user_dst, make_pd, validate_only);
    if (!kernel) return Error::Ok;
    split_rows(*kernel, pool, src_dims, dst_dims, user_w_dims, act, bias_md, strides, dilations,
               pads, user_w, weight.const_data_ptr());
    *out = std::move(kernel);
  } catch (const dnnl::error& e) {
    *reason = std::string("oneDNN int8 convolution: ") + e.what();
    return Error::NotSupported;
  }
  return Error::Ok;
}

// Splits an int8 linear into blocks of output columns for `pool` (two per pool thread, as the
// convolution bands): each band reads the whole input, owns its block of the weights (reordered
// here, with oneDNN's compensation; the whole op's copy is freed, so nothing is held twice), its
// weight scales and bias, and writes its columns of the row-major output. Every int32 sum is the
// whole op's, so the bytes are too. Columns, not rows: the batches these models run (32) are
// already short for oneDNN's row blocking, and each thread then streams half the weights. A band
// oneDNN would run on its reference kernel keeps the op whole.
void split_columns(QuantizedKernel& kernel, onednn::WorkPool* pool, int64_t rows, int64_t depth,
                   int64_t cols, memory::data_type act, const int8_t* weight, const float* bias,
                   const float* scales) {
  using tag = memory::format_tag;
  if (pool == nullptr || pool->size() < 2 || !int8_split_enabled()) return;
  const int64_t blocks = cols / onednn::kLinearColumns;
  const int64_t bands = std::min<int64_t>(blocks, 2 * pool->size());
  if (bands < 2) return;
  const bool whole_is_ref = kernel.implementation().rfind("ref", 0) == 0;
  for (int64_t b = 0; b < bands; ++b) {
    const auto [first, last] = onednn::block_slice(cols, onednn::kLinearColumns,
                                                   static_cast<size_t>(bands),
                                                   static_cast<size_t>(b));
    const int64_t width = last - first;
    memory::desc src({rows, depth}, act, tag::ab);
    memory::desc dst({rows, width}, act, tag::ab);
    memory::desc any_w({depth, width}, memory::data_type::s8, tag::any);
    memory::desc bias_md = bias != nullptr
                               ? memory::desc({1, width}, memory::data_type::f32, tag::ab)
                               : memory::desc();
    dnnl::matmul::primitive_desc pd(kernel.engine(), src, any_w, bias_md, dst, kernel.attr(),
                                    /*allow_empty=*/true);
    if (!pd || (std::string(pd.impl_info_str()).rfind("ref", 0) == 0 && !whole_is_ref)) {
      return kernel.use_bands(nullptr);
    }
    // Rows first..last of torch's [O, K] weight: a {K, width} matrix, column-major.
    memory::desc user_w({depth, width}, memory::data_type::s8, memory::dims{1, depth});
    memory user(user_w, kernel.engine(), const_cast<int8_t*>(weight + first * depth));
    memory weights(pd.weights_desc(), kernel.engine());
    dnnl::stream stream(kernel.engine());
    dnnl::reorder(user, weights).execute(stream, user, weights);
    stream.wait();
    std::unordered_map<int, memory> own{{DNNL_ARG_WEIGHTS, weights}};
    own[DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS] =
        memory(memory::desc({width}, memory::data_type::f32, tag::a), kernel.engine(),
               const_cast<float*>(scales + first));
    if (bias != nullptr) {
      own[DNNL_ARG_BIAS] = memory(bias_md, kernel.engine(), const_cast<float*>(bias + first));
    }
    kernel.add_band(pd, 0, static_cast<size_t>(first), own, static_cast<size_t>(cols));
  }
  kernel.use_bands(pool);
  kernel.release_whole_weights();
}

Error bind_linear(const OpBinding& op, std::unique_ptr<BoundKernel>* out, std::string* reason,
                  onednn::WorkPool* pool, bool validate_only) {
  const Tensor& input = op.args[0]->toTensor();
  const Tensor& weight = op.args[1]->toTensor();  // [O, K]
  const Quantization q = read_quantization(op, 4);
  const memory::data_type act = data_type_of(input.scalar_type());
  const int64_t rows = input.size(0), depth = input.size(1), cols = weight.size(0);
  memory::desc user_src({rows, depth}, act, memory::format_tag::ab);
  memory::desc user_dst({rows, cols}, act, memory::format_tag::ab);
  // The matmul's weights are {K, O}: torch's [O, K] row-major is that matrix column-major.
  memory::desc user_w({depth, cols}, memory::data_type::s8, memory::format_tag::ba);
  const bool has_bias = op.args[3]->isTensor();
  auto make_pd = [&](const dnnl::engine& engine, const dnnl::primitive_attr& attr) {
    memory::desc any_w({depth, cols}, memory::data_type::s8, memory::format_tag::any);
    memory::desc bias_md = has_bias ? memory::desc({1, cols}, memory::data_type::f32,
                                                   memory::format_tag::ab)
                                    : memory::desc();
    return dnnl::matmul::primitive_desc(engine, user_src, any_w, bias_md, user_dst, attr);
  };
  try {
    // A scale per output column (dim 1 of the {K, O} weights).
    auto kernel =
        QuantizedKernel::make(op, q, 1 << 1, user_src, user_w, user_dst, make_pd, validate_only);
    if (!kernel) return Error::Ok;
    split_columns(*kernel, pool, rows, depth, cols, act, weight.const_data_ptr<int8_t>(),
                  has_bias ? op.args[3]->toTensor().const_data_ptr<float>() : nullptr,
                  op.args[2]->toTensor().const_data_ptr<float>());
    *out = std::move(kernel);
  } catch (const dnnl::error& e) {
    *reason = std::string("oneDNN int8 matmul: ") + e.what();
    return Error::NotSupported;
  }
  return Error::Ok;
}

// An int8 max pool: oneDNN's pooling on the int8 values (the session keeps its output
// channels-last when its input is, unless a plain reader needs the output). The pooling runs in
// the input's layout: a channels-last input with a plain output is pooled into a staging buffer
// and reordered (oneDNN pools mixed layouts on its reference kernel: 68 ms for ResNet-18's
// 112x112x64 stem pool at load 5; the jit reorder of its 56x56x64 output takes 56 us).
class QuantizedPoolKernel final : public BoundKernel {
 public:
  QuantizedPoolKernel(const OpBinding& op, bool input_channels_last, bool output_channels_last) {
    const Tensor& input = op.args[0]->toTensor();
    const Tensor& output = op.args[op.args.size() - 2]->toTensor();
    input_ = input.unsafeGetTensorImpl();
    output_ = output.unsafeGetTensorImpl();
    const auto kernel = op.args[1]->toIntList(), stride = op.args[2]->toIntList();
    const auto padding = op.args[3]->toIntList(), dilation = op.args[4]->toIntList();
    const memory::data_type act = data_type_of(input.scalar_type());
    auto layout = [](bool channels_last) {
      return channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
    };
    memory::desc src(dims_of(input), act, layout(input_channels_last));
    memory::desc dst(dims_of(output), act, layout(input_channels_last));
    const memory::desc user_dst(dims_of(output), act, layout(output_channels_last));
    memory::dims pad_left{padding[0], padding[1]}, pad_right(2);
    for (size_t d = 0; d < 2; ++d) {
      // The right padding that makes oneDNN's floor division give torch's size (ceil_mode:
      // the last window reaching past the input); never negative (floor drops the rest).
      const int64_t span = (dilation[d] - 1) * (kernel[d] - 1) + kernel[d];
      pad_right[d] = std::max<int64_t>(
          (output.size(2 + d) - 1) * stride[d] + span - input.size(2 + d) - padding[d], 0);
    }
    dnnl::pooling_forward::primitive_desc pd(
        engine_, dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, src, dst,
        {stride[0], stride[1]}, {kernel[0], kernel[1]}, {dilation[0] - 1, dilation[1] - 1},
        pad_left, pad_right);
    primitive_ = dnnl::primitive(pd);
    src_ = memory(pd.src_desc(), engine_, DNNL_MEMORY_NONE);
    if (user_dst == dst) {
      dst_ = memory(pd.dst_desc(), engine_, DNNL_MEMORY_NONE);
    } else {
      dst_ = memory(pd.dst_desc(), engine_);
      user_dst_ = memory(user_dst, engine_, DNNL_MEMORY_NONE);
      reorder_ = dnnl::reorder(dst_, user_dst_);
    }
  }

  Error run(KernelRuntimeContext& context) override {
    OmpThreads threads(1);
    try {
      src_.set_data_handle(input_->mutable_data());
      if (reorder_) {
        user_dst_.set_data_handle(output_->mutable_data());
      } else {
        dst_.set_data_handle(output_->mutable_data());
      }
      primitive_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}});
      if (reorder_) reorder_.execute(stream_, dst_, user_dst_);
      stream_.wait();
    } catch (const dnnl::error&) {
      context.fail(Error::Internal);
      return Error::Internal;
    }
    return Error::Ok;
  }

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::primitive primitive_;
  memory src_, dst_, user_dst_;
  dnnl::reorder reorder_;  // dst_ (staging, the input's layout) -> user_dst_; empty: none
  executorch::aten::TensorImpl* input_ = nullptr;
  executorch::aten::TensorImpl* output_ = nullptr;
};

Error bind_max_pool(const OpBinding& op, std::unique_ptr<BoundKernel>* out, std::string* reason,
                    bool input_channels_last, bool output_channels_last) {
  try {
    *out = std::make_unique<QuantizedPoolKernel>(op, input_channels_last, output_channels_last);
  } catch (const dnnl::error& e) {
    *reason = std::string("oneDNN int8 max pooling: ") + e.what();
    return Error::NotSupported;
  }
  return Error::Ok;
}

// An int8 add: dequantize both operands, add, clamp, quantize, with quantize_convert's arithmetic
// (the portable kernels', so the bytes are those of the float island it replaces): on
// kernels/quantized_add.h's one-pass loop, in slices on the work pool when the op is large
// enough, or (ET_CPU_OWN_QUANTIZED_ADD=0, or no AVX-512 BW) with quantize_convert's loops in
// chunks that stay in L1, on the calling thread. It runs in its output's layout; an operand in
// the other one is reordered into a staging buffer first.
class QuantizedAddKernel final : public BoundKernel {
 public:
  QuantizedAddKernel(const OpBinding& op, bool a_channels_last, bool b_channels_last,
                     bool output_channels_last, onednn::WorkPool* pool) {
    const Tensor& a = op.args[0]->toTensor();
    const Tensor& output = op.args[op.args.size() - 2]->toTensor();
    const bool is_signed = a.scalar_type() == ScalarType::Char;
    auto grid = [&](size_t index) {
      onednn::TensorQuantization q;
      q.scale = static_cast<float>(op.args[index]->toDouble());
      q.zero_point = static_cast<int32_t>(op.args[index + 1]->toInt());
      q.quant_min = static_cast<int32_t>(op.args[8]->toInt());
      q.quant_max = static_cast<int32_t>(op.args[9]->toInt());
      q.is_signed = is_signed;
      return q;
    };
    a_q_ = grid(1);
    b_q_ = grid(4);
    out_q_ = grid(6);
    low_ = static_cast<float>(op.args[10]->toDouble());
    high_ = static_cast<float>(op.args[11]->toDouble());
    output_ = output.unsafeGetTensorImpl();
    elements_ = output.numel();
    own_loop_ = onednn::quantized_add_supported();
    if (own_loop_) {
      params_.a_scale = a_q_.scale;
      params_.a_zero_point = a_q_.zero_point;
      params_.b_scale = b_q_.scale;
      params_.b_zero_point = b_q_.zero_point;
      params_.out_scale = out_q_.scale;
      params_.out_zero_point = out_q_.zero_point;
      params_.quant_min = out_q_.quant_min;
      params_.quant_max = out_q_.quant_max;
      params_.low = low_;
      params_.high = high_;
      params_.is_signed = is_signed;
      // Slices of at least kSliceElements (a few microseconds each), two per pool thread.
      if (pool != nullptr && pool->size() >= 2 && int8_split_enabled()) {
        slices_ = std::min<int64_t>(elements_ / kSliceElements, 2 * pool->size());
        if (slices_ >= 2) pool_ = pool;
      }
    }
    const memory::data_type act = data_type_of(a.scalar_type());
    auto layout = [](bool channels_last) {
      return channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
    };
    const bool cl[2] = {a_channels_last, b_channels_last};
    for (size_t i = 0; i < 2; ++i) {
      const Tensor& x = op.args[i == 0 ? 0 : 3]->toTensor();
      Operand& operand = operands_[i];
      operand.tensor = x.unsafeGetTensorImpl();
      if (x.dim() != 4 || cl[i] == output_channels_last) continue;
      memory::desc from(dims_of(x), act, layout(cl[i])), to(dims_of(x), act,
                                                              layout(output_channels_last));
      operand.user = memory(from, engine_, DNNL_MEMORY_NONE);
      operand.staging = memory(to, engine_);
      operand.reorder = dnnl::reorder(operand.user, operand.staging);
    }
  }

  Error run(KernelRuntimeContext& context) override {
    const uint8_t* inputs[2];
    try {
      for (size_t i = 0; i < 2; ++i) {
        Operand& operand = operands_[i];
        if (operand.reorder) {
          operand.user.set_data_handle(operand.tensor->mutable_data());
          operand.reorder.execute(stream_, operand.user, operand.staging);
          stream_.wait();
          inputs[i] = static_cast<const uint8_t*>(operand.staging.get_data_handle());
        } else {
          inputs[i] = static_cast<const uint8_t*>(operand.tensor->data());
        }
      }
    } catch (const dnnl::error&) {
      context.fail(Error::Internal);
      return Error::Internal;
    }
    auto* out = static_cast<uint8_t*>(output_->mutable_data());
    if (own_loop_) {
      if (pool_ == nullptr) {
        onednn::quantized_add(params_, inputs[0], inputs[1], out, elements_);
        return Error::Ok;
      }
      pool_->run(static_cast<size_t>(slices_), [&](size_t task, int) {
        // Slices of whole 64-byte blocks (the loop's step), the last one takes the rest.
        const auto [first, last] = onednn::block_slice(elements_, 64,
                                                       static_cast<size_t>(slices_), task);
        onednn::quantized_add(params_, inputs[0] + first, inputs[1] + first, out + first,
                              last - first);
      });
      return Error::Ok;
    }
    const bool clamp_low = std::isfinite(low_), clamp_high = std::isfinite(high_);
    constexpr int64_t kChunk = 256;
    alignas(64) float a[kChunk], b[kChunk];
    for (int64_t begin = 0; begin < elements_; begin += kChunk) {
      const int64_t n = std::min(kChunk, elements_ - begin);
      onednn::dequantize_per_tensor(a_q_, inputs[0] + begin, n, a);
      onednn::dequantize_per_tensor(b_q_, inputs[1] + begin, n, b);
      for (int64_t i = 0; i < n; ++i) a[i] += b[i];
      if (clamp_low) {
        for (int64_t i = 0; i < n; ++i) a[i] = std::max(a[i], low_);
      }
      if (clamp_high) {
        for (int64_t i = 0; i < n; ++i) a[i] = std::min(a[i], high_);
      }
      onednn::quantize_per_tensor(out_q_, a, n, out + begin);
    }
    return Error::Ok;
  }

 private:
  struct Operand {
    executorch::aten::TensorImpl* tensor = nullptr;
    memory user, staging;  // with a reorder: the operand as it lies, and in the output's layout
    dnnl::reorder reorder;
  };

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  Operand operands_[2];
  onednn::TensorQuantization a_q_, b_q_, out_q_;
  float low_ = 0.f, high_ = 0.f;  // the clamp (infinite: none)
  executorch::aten::TensorImpl* output_ = nullptr;
  int64_t elements_ = 0;
  static constexpr int64_t kSliceElements = 8192;
  bool own_loop_ = false;  // kernels/quantized_add.h, else quantize_convert's chunked loops
  onednn::QuantizedAddParams params_;
  onednn::WorkPool* pool_ = nullptr;  // null: the whole op on the calling thread
  int64_t slices_ = 1;
};

}  // namespace

bool quantized_output_chainable(const std::string& kernel) { return kernel == kConv; }

bool quantized_layout_follows_input(const std::string& kernel) {
  return kernel == kMaxPool || kernel == kAdd;
}

int quantized_second_input(const std::string& kernel) { return kernel == kAdd ? 3 : -1; }

std::string quantized_implementation(const BoundKernel& kernel) {
  if (dynamic_cast<const DepthwiseInt8Kernel*>(&kernel) != nullptr) {
    return "depthwise_int8:avx512_vnni";
  }
  return dynamic_cast<const PointwiseInt8Kernel*>(&kernel) != nullptr
             ? "pointwise_int8:avx512_vnni"
             : "";
}

namespace {

Error bind_or_check(const OpBinding& op, std::unique_ptr<BoundKernel>* out, std::string* reason,
                    bool input_channels_last, bool output_channels_last, onednn::WorkPool* pool,
                    bool second_input_channels_last, bool validate_only) {
  const std::string kernel = op.kernel;
  if (kernel == kAdd) {
    try {
      *out = std::make_unique<QuantizedAddKernel>(op, input_channels_last,
                                                  second_input_channels_last,
                                                  output_channels_last, pool);
    } catch (const dnnl::error& e) {
      *reason = std::string("int8 add: ") + e.what();
      return Error::NotSupported;
    }
    return Error::Ok;
  }
  if (kernel == kMaxPool) {
    return bind_max_pool(op, out, reason, input_channels_last, output_channels_last);
  }
  const size_t first = kernel == kConv ? 8 : 4;
  const Quantization q = read_quantization(op, first);
  const ScalarType dtype = op.args[0]->toTensor().scalar_type();
  const int64_t low = dtype == ScalarType::Char ? -128 : 0, high = low + 255;
  if (q.quant_min != low || q.quant_max != high) {
    *reason = "quantized output range narrower than its dtype";
    return Error::NotSupported;
  }
  // oneDNN sizes a primitive's parallel split when it is created: create it with the team it runs on.
  OmpThreads threads(int8_threads());
  return kernel == kConv
             ? bind_conv(op, out, reason, input_channels_last, output_channels_last, pool,
                         validate_only)
             : bind_linear(op, out, reason, pool, validate_only);
}

}  // namespace

Error bind_quantized(const OpBinding& op, std::unique_ptr<BoundKernel>* out, std::string* reason,
                     bool input_channels_last, bool output_channels_last,
                     onednn::WorkPool* pool, bool second_input_channels_last) {
  return bind_or_check(op, out, reason, input_channels_last, output_channels_last, pool,
                       second_input_channels_last, /*validate_only=*/false);
}

Error check_quantized(const OpBinding& op, std::string* reason) {
  std::unique_ptr<BoundKernel> unused;
  return bind_or_check(op, &unused, reason, false, false, nullptr, false,
                       /*validate_only=*/true);
}

}  // namespace cpu
}  // namespace et_cpu_plugin
