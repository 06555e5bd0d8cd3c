// The convolution-like plan (ConvLikePlan on ConvCore), one for convolutions and transposed
// convolutions: staging between the caller's layouts and the primitive's, running the primitive
// whole or in pieces, and the split into images or row bands; the runs of our own kernels a plan
// holds instead of a primitive (OwnConvRun). conv_plan.cc and deconv_plan.cc only choose the
// primitive (or our kernel), split it and reorder the weights.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/depthwise_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/row_gemm.h"
#include "backends/cpu/runtime/providers/optimized/kernels/stem_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/stream_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/winograd_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {

ConvLikePlan::ConvLikePlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

const Layout& ConvLikePlan::input_layout() const { return impl_->input_layout; }
const Layout& ConvLikePlan::output_layout() const { return impl_->output_layout; }
std::vector<int64_t> ConvLikePlan::output_dims() const { return impl_->output_layout.dims(); }
size_t ConvLikePlan::weights_bytes() const { return impl_->weights_bytes(); }
size_t ConvLikePlan::scratchpad_bytes() const { return impl_->scratchpad_md.get_size(); }
std::string ConvLikePlan::implementation() const { return impl_->implementation; }
size_t ConvLikePlan::pieces() const {
  if (impl_->own) return impl_->own->tasks;
  return std::max<size_t>(1, impl_->pieces.size());
}

void ConvLikePlan::run(const float* input, float* output, const float* residual) const {
  impl_->run(impl_->name, input, output, residual);
}

bool ConvLikePlan::runs_images_together() const {
  return impl_->own && impl_->own->runs_images_together();
}

void ConvLikePlan::run_images(const float* input, float* output, int64_t images) const {
  if (!runs_images_together() || images < 1) {
    throw ProviderError(std::string(impl_->name) + ": " + std::to_string(images) +
                        " images need a plan of one image on our depthwise or stem kernel");
  }
  impl_->own->run_images(*impl_->state, input, output, images);
}

void ConvCore::prepare(const std::shared_ptr<ProviderState>& provider,
                       const dnnl::primitive_desc_base& pd, bool bias, bool add,
                       const memory::desc& given_src_md, OutputLayout output,
                       const Dims& dst_dims, bool input_in_bands) {
  ProviderState& s = *provider;
  state = provider;
  implementation = pd.impl_info_str();
  scratchpad_md = pd.scratchpad_desc();
  s.reserve_scratchpad(scratchpad_md);
  has_bias = bias;
  has_add = add;
  primitive_src_md = pd.src_desc();
  primitive_dst_md = pd.dst_desc();
  const memory::desc out_md = output == OutputLayout::kBest
      ? primitive_dst_md
      : output == OutputLayout::kChannelsLast ? channels_last_md(dst_dims) : plain_md(dst_dims);
  input_layout = layout_of(given_src_md);
  output_layout = layout_of(out_md);
  const auto make_reorder = [&](const memory::desc& from, const memory::desc& to) {
    return dnnl::reorder(dnnl::reorder::primitive_desc(s.engine, from, s.engine, to));
  };
  if (primitive_src_md != given_src_md) {
    reorder_input = true;
    input_reorder = make_reorder(given_src_md, primitive_src_md);
    staged_input = std::make_shared<AlignedBuffer>();
    staged_input->reserve(primitive_src_md.get_size());
    s.staging_bytes += primitive_src_md.get_size();
    if (input_in_bands) {
      input_bands = split_reorder(s, given_src_md, primitive_src_md);
      band_memories.resize(input_bands.size());
    }
  }
  if (primitive_dst_md != out_md) {
    reorder_output = true;
    output_reorder = make_reorder(primitive_dst_md, out_md);
    residual_reorder = make_reorder(out_md, primitive_dst_md);
    staged_output = std::make_shared<AlignedBuffer>();
    staged_output->reserve(primitive_dst_md.get_size());
    s.staging_bytes += primitive_dst_md.get_size();
  }
}

void ConvCore::describe_split() {
  implementation += pieces_note(pieces.size());
  if (!input_bands.empty()) {
    implementation += ", input reordered in " + std::to_string(input_bands.size()) + " bands";
  }
}

size_t ConvCore::weights_bytes() const {
  if (own) return own->weights_bytes();
  size_t total = weights.md.get_size() + (has_bias ? bias.md.get_size() : 0);
  // Channel pieces own their weight blocks; other pieces' weights are empty (the plan's).
  for (const Piece& piece : pieces) {
    total += piece.weights.md.get_size() + (piece.channels > 0 && has_bias
                                                ? piece.bias.md.get_size()
                                                : 0);
  }
  return total;
}

std::vector<Piece> split_images_or_rows(ProviderState& state, const Dims& src_dims,
                                        const Dims& dst_dims, double flops, const Dims& pad_left,
                                        const Dims& pad_right, const BandOf& band,
                                        const MakePiecePrimitive& make) {
  const bool by_batch = src_dims[0] > 1;
  const int64_t units = by_batch ? src_dims[0] : dst_dims[2];
  const size_t count = state.pieces_for(flops, units);
  // Floats per image, and per row of the first spatial dim (channels-last: contiguous).
  const int64_t src_row = static_cast<int64_t>(product(src_dims, 3)) * src_dims[1];
  const int64_t dst_row = static_cast<int64_t>(product(dst_dims, 3)) * dst_dims[1];
  const int64_t src_image = src_row * src_dims[2];
  const int64_t dst_image = dst_row * dst_dims[2];
  if (by_batch && count > 1 && kernel_opted_in("ET_CPU_CONV_IMAGE_TILES")) {
    // ET_CPU_CONV_IMAGE_TILES=1: each piece runs one primitive of a single image over its images
    // (Piece::tiles), the same at every batch size, so a new batch makes no kernel. Off by
    // default until its steady state is measured on a quiet machine (under load: 0.95-1.05x of
    // the batch slices' primitives, too noisy to tell).
    std::vector<Piece> pieces = make_pieces(state, count, [&](size_t i, Piece& piece) {
      const auto [begin, end] = slice_of(units, count, i);
      Dims image_src = src_dims;
      Dims image_dst = dst_dims;
      image_src[0] = image_dst[0] = 1;
      piece.src_offset = static_cast<size_t>(begin * src_image);
      piece.dst_offset = static_cast<size_t>(begin * dst_image);
      piece.tiles = end - begin;
      piece.src_tile = static_cast<size_t>(src_image);
      piece.dst_tile = static_cast<size_t>(dst_image);
      piece.src_md = channels_last_md(image_src);
      piece.dst_md = channels_last_md(image_dst);
      return make(piece, pad_left, pad_right);
    });
    if (!pieces.empty()) return pieces;
  }
  return make_pieces(state, count, [&](size_t i, Piece& piece) {
    const auto [begin, end] = slice_of(units, count, i);
    Dims piece_src = src_dims;
    Dims piece_dst = dst_dims;
    Dims left = pad_left;
    Dims right = pad_right;
    if (by_batch) {
      piece_src[0] = piece_dst[0] = end - begin;
      piece.src_offset = static_cast<size_t>(begin * src_image);
      piece.dst_offset = static_cast<size_t>(begin * dst_image);
    } else {
      BandRows rows;
      if (!band(begin, end, &rows)) {
        return false;
      }
      piece_src[2] = rows.hi - rows.lo;
      piece_dst[2] = end - begin;
      left[0] = rows.pad_left;
      right[0] = rows.pad_right;
      piece.src_offset = static_cast<size_t>(rows.lo * src_row);
      piece.dst_offset = static_cast<size_t>(begin * dst_row);
    }
    piece.src_md = channels_last_md(piece_src);
    piece.dst_md = channels_last_md(piece_dst);
    return make(piece, left, right);
  });
}

namespace {

// Runs `rows(image, row_begin, row_end, first_output_row)` over the batch's output rows (`batch`
// images of `out_h` rows, image after image) in `tasks` near-equal contiguous slices on the pool;
// a slice crossing images is one call per image.
template <typename Rows>
void run_image_rows(ProviderState& state, size_t tasks, int64_t batch, int64_t out_h,
                    const Rows& rows) {
  const auto slice = [&](int64_t begin, int64_t end, int) {
    while (begin < end) {
      const int64_t image = begin / out_h;
      const int64_t row = begin - image * out_h;
      const int64_t last = std::min(end - image * out_h, out_h);
      rows(image, row, last, begin);
      begin = image * out_h + last;
    }
  };
  run_in_slices(state.pool.get(), tasks, batch * out_h, slice);
}

}  // namespace

// The runs of our own kernels (OwnConvRun).

size_t RowGemmRun::weights_bytes() const { return gemm->weights_bytes(); }

void RowGemmRun::run(ProviderState& state, const float* input, float* output,
                     const float* residual, const float*) const {
  run_row_gemm(state, *this, input, output, residual);
}

namespace {

// Output rows [row, last) of image `image` into `output` from the batch's row `first` on.
void image_rows(const DepthwiseConv& conv, const float* input, float* output, int64_t image,
                int64_t row, int64_t last, int64_t first) {
  const DepthwiseShape& s = conv.shape();
  conv.run_rows(input + image * s.in_h * s.in_w * s.channels, 0, s.in_h,
                output + first * s.out_w * s.channels, row, last);
}

void image_rows(const StemConv& conv, const float* input, float* output, int64_t image,
                int64_t row, int64_t last, int64_t first) {
  const StemShape& s = conv.shape();
  conv.run_rows(input + image * s.in_h * s.in_w * s.in_channels,
                output + first * s.out_w * s.out_channels, row, last);
}

}  // namespace

template <typename Kernel>
size_t ImageRowsRun<Kernel>::weights_bytes() const { return conv->weights_bytes(); }

template <typename Kernel>
void ImageRowsRun<Kernel>::run(ProviderState& state, const float* input, float* output,
                               const float*, const float*) const {
  run_image_rows(state, tasks, batch, conv->shape().out_h,
                 [&](int64_t image, int64_t row, int64_t last, int64_t first) {
                   image_rows(*conv, input, output, image, row, last, first);
                 });
}

template <typename Kernel>
void ImageRowsRun<Kernel>::run_images(ProviderState& state, const float* input, float* output,
                                      int64_t images) const {
  ImageRowsRun split = *this;
  split.tasks = state.pieces_for(image_flops * static_cast<double>(images),
                                 images * conv->shape().out_h);
  split.batch = images;
  split.run(state, input, output, nullptr, nullptr);
}

template struct ImageRowsRun<DepthwiseConv>;
template struct ImageRowsRun<StemConv>;

size_t PointwiseRun::weights_bytes() const { return conv->weights_bytes(); }

void PointwiseRun::run(ProviderState& state, const float* input, float* output,
                       const float* residual, const float* weights) const {
  run_pointwise(state, *this, input, output, residual, weights);
}

size_t StreamConvRun::weights_bytes() const { return conv->weights_bytes(); }

void StreamConvRun::run(ProviderState& state, const float* input, float* output, const float*,
                        const float*) const {
  run_in_slices(state.pool.get(), tasks, conv->blocks(), [&](int64_t begin, int64_t end, int) {
    conv->run_blocks(input, output, batch, begin, end);
  });
}

size_t WinogradRun::weights_bytes() const { return conv->weights_bytes(); }

void WinogradRun::run(ProviderState& state, const float* input, float* output,
                      const float* residual, const float*) const {
  const int64_t groups = conv->groups(batch);
  const int64_t blocks = conv->blocks();
  run_in_slices(state.pool.get(), tasks, by_blocks ? blocks : groups,
                [&](int64_t begin, int64_t end, int) {
                  if (by_blocks) {
                    conv->run(input, output, residual, batch, 0, groups, begin, end);
                  } else {
                    conv->run(input, output, residual, batch, begin, end, 0, blocks);
                  }
                });
}

InputChannelScaling::InputChannelScaling(std::shared_ptr<const void> owner, const float* weights,
                                         size_t floats, std::vector<int32_t> channel)
    : owner_(std::move(owner)), weights_(weights), floats_(floats), channel_(std::move(channel)) {
  kind_.resize(floats_ / 16);
  real_.resize(floats_ / 16);
  base_.resize(floats_ / 16);
  for (size_t v = 0; v < kind_.size(); ++v) {
    const int32_t* c = channel_.data() + v * 16;
    // The lanes that are weights (not padding), and the first of them.
    uint16_t real = 0;
    int first = -1;
    for (int lane = 0; lane < 16; ++lane) {
      if (c[lane] < 0) continue;
      real = static_cast<uint16_t>(real | (1u << lane));
      if (first < 0) first = lane;
    }
    bool same = first >= 0;
    bool consecutive = real == 0xffff;
    for (int lane = 0; lane < 16; ++lane) {
      same = same && (c[lane] < 0 || c[lane] == c[first]);
      consecutive = consecutive && c[lane] == c[0] + lane;
    }
    real_[v] = real;
    base_[v] = same ? c[first] : c[0];  // a broadcast's channel, the first of consecutive ones
    kind_[v] = same ? kBroadcast : consecutive ? kConsecutive : kGather;
  }
}

namespace {

ET_AVX512 void scale_vectors(const float* weights, const int32_t* channel, const uint8_t* kind,
                             const uint16_t* real, const int32_t* base, size_t vectors,
                             const float* scale, float* out) {
  for (size_t v = 0; v < vectors; ++v) {
    const size_t k = v * 16;
    const __m512 w = _mm512_loadu_ps(weights + k);
    __m512 g;
    if (kind[v] == 0) {
      g = _mm512_maskz_mov_ps(real[v], _mm512_set1_ps(scale[base[v]]));
    } else if (kind[v] == 1) {
      g = _mm512_loadu_ps(scale + base[v]);
    } else {
      const __m512i index = _mm512_loadu_si512(channel + k);
      g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), real[v], index, scale, 4);
    }
    _mm512_storeu_ps(out + k, _mm512_mul_ps(w, g));
  }
}

}  // namespace

void InputChannelScaling::scale_range(const float* scale, float* out, size_t begin,
                                      size_t end) const {
  size_t k = begin;
  if (cpu_has_avx512()) {
    const size_t first = begin / 16;
    const size_t last = std::min(end / 16, kind_.size());
    if (last > first) {
      scale_vectors(weights_ + first * 16, channel_.data() + first * 16, kind_.data() + first,
                    real_.data() + first, base_.data() + first, last - first, scale,
                    out + first * 16);
      k = last * 16;
    }
  }
  for (; k < end; ++k) {
    out[k] = channel_[k] >= 0 ? weights_[k] * scale[channel_[k]] : 0.0f;
  }
}

namespace {

// Whether every piece of `p` (or its whole primitive) reads the plan's one weights buffer, or
// it runs our own 1x1 kernel split by pixels (each slice reads all of RowGemm's packing).
bool one_weights_buffer(const ConvCore& p) {
  if (p.own) return p.own->one_weights_buffer();
  if (!p.weights.bytes || p.weights.md.is_zero()) return false;
  return std::none_of(p.pieces.begin(), p.pieces.end(),
                      [](const Piece& piece) { return piece.channels > 0; });
}

}  // namespace

std::shared_ptr<const InputChannelScaling> PointwiseRun::input_channel_scaling() const {
  // RowGemm's packing: per column group, [K][its columns padded to whole vectors], from
  // group_offset[g]; the padding lanes (and any gap between groups) map to no channel.
  const RowGemm::Packed& packed = conv->packed();
  const int64_t groups = pointwise_groups(packed.n);
  const auto width = [&](int64_t g) { return pointwise_group_vectors(packed.n, g) * 16; };
  const size_t floats = packed.group_offset.back() +
                        static_cast<size_t>(packed.k * width(groups - 1));
  std::vector<int32_t> channel(floats, -1);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t columns =
        std::min(kPointwiseGroupColumns, packed.n - g * kPointwiseGroupColumns);
    const size_t at = packed.group_offset[static_cast<size_t>(g)];
    for (int64_t i = 0; i < packed.k; ++i) {
      for (int64_t c = 0; c < columns; ++c) {
        channel[at + static_cast<size_t>(i * width(g) + c)] = static_cast<int32_t>(i);
      }
    }
  }
  return std::make_shared<InputChannelScaling>(conv, packed.stream(), floats, std::move(channel));
}

std::shared_ptr<const InputChannelScaling> ConvLikePlan::input_channel_scaling() const {
  const Impl& p = *impl_;
  if (!one_weights_buffer(p)) return nullptr;
  if (p.own) return p.own->input_channel_scaling();
  const memory::dims dims = p.weights.md.get_dims();
  // groups 1: [C_out, C_in, *kernel]; grouped weights have one more dim than the input.
  if (dims.size() != static_cast<size_t>(p.input_layout.dims().size())) return nullptr;
  const int64_t in_channels = dims[1];
  if (in_channels >= (int64_t{1} << 24)) return nullptr;  // channel numbers exact in floats
  int64_t per_channel = 1;  // the kernel's extent
  for (size_t d = 2; d < dims.size(); ++d) per_channel *= dims[d];
  const int64_t total = dims[0] * in_channels * per_channel;
  // Channel c + 1 at every weight of input channel c, reordered into the plan's layout: the
  // padding comes out 0.
  std::vector<float> numbers(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    numbers[static_cast<size_t>(i)] = static_cast<float>((i / per_channel) % in_channels + 1);
  }
  const size_t floats = p.weights.md.get_size() / sizeof(float);
  std::vector<float> laid_out(floats, 0.0f);
  ProviderState& state = *p.state;
  wrap_dnnl("weight scaling map", [&] {
    memory src(plain_md(dims), state.engine, numbers.data());
    memory dst(p.weights.md, state.engine, laid_out.data());
    dnnl::reorder(src, dst).execute(state.stream, src, dst);
    state.stream.wait();
  });
  std::vector<int32_t> channel(floats);
  for (size_t k = 0; k < floats; ++k) channel[k] = static_cast<int32_t>(laid_out[k]) - 1;
  return std::make_shared<InputChannelScaling>(
      p.weights.bytes, static_cast<const float*>(p.weights.bytes->data()), floats,
      std::move(channel));
}

void ConvLikePlan::run_with_weights(const float* input, float* output, const float* residual,
                                    const float* weights) const {
  if (weights == nullptr || !one_weights_buffer(*impl_)) {
    throw ProviderError(std::string(impl_->name) + ": per-call weights need a plan of one "
                        "oneDNN weights buffer or our own 1x1 kernel split by pixels");
  }
  impl_->run(impl_->name, input, output, residual, weights);
}

void ConvCore::run(const char* what, const float* input, float* output, const float* residual,
                   const float* weights_override) const {
  const ConvCore& p = *this;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError(std::string(what) + ": post-op add needs a residual tensor, got null");
  }
  if (p.own) {
    p.own->run(state, input, output, residual, weights_override);
    return;
  }
  ThreadCountGuard threads(state.omp_threads);
  const memory::desc& input_md = p.input_layout.impl().md;
  const memory::desc& output_md = p.output_layout.impl().md;
  // What the primitive reads and writes: the caller's buffers, or the staging buffers.
  const float* src_data = p.reorder_input ? static_cast<const float*>(p.staged_input->data())
                                          : input;
  float* dst_data = p.reorder_output ? static_cast<float*>(p.staged_output->data()) : output;
  // With pieces and no staging, each piece copies its own slice of the residual (in parallel).
  const bool copy_residual_per_piece =
      !p.pieces.empty() && p.has_add && !p.reorder_output && residual != output;
  wrap_dnnl("layout conversion", [&] {
    if (p.reorder_input) {
      if (p.input_bands.empty()) {
        p.input_reorder.execute(
            state.stream, point(p.conversions, kInput, input_md, state.engine, input),
            point(p.conversions, kStagedInput, p.primitive_src_md, state.engine, src_data));
      } else {
        state.pool->run(p.input_bands.size(), [&](size_t index, int worker) {
          wrap_dnnl("input reorder band", [&] {
            std::unordered_map<int, memory>& memories = p.band_memories[index];
            p.input_bands[index].execute(
                state.piece_streams[worker],
                point(memories, DNNL_ARG_FROM, input_md, state.engine, input),
                point(memories, DNNL_ARG_TO, p.primitive_src_md, state.engine, src_data));
            state.piece_streams[worker].wait();
          });
        });
      }
    }
    if (p.has_add) {
      // The sum post-op adds what dst holds before the call.
      if (p.reorder_output) {
        p.residual_reorder.execute(
            state.stream, point(p.conversions, kResidual, output_md, state.engine, residual),
            point(p.conversions, kStagedOutput, p.primitive_dst_md, state.engine, dst_data));
      } else if (residual != output && !copy_residual_per_piece) {
        std::memcpy(output, residual, p.output_layout.size_bytes());
      }
    }
    state.stream.wait();
  });
  if (!p.pieces.empty()) {
    const int64_t out_channels = p.output_layout.dims()[1];
    // Where a channel piece reads its residual slice: the staged output already holds it.
    const float* residual_rows = p.reorder_output ? dst_data : residual;
    state.pool->run(p.pieces.size(), [&](size_t index, int worker) {
      const Piece& piece = p.pieces[index];
      const bool channel_piece = piece.channels > 0;
      float* piece_dst = channel_piece ? static_cast<float*>(state.piece_outputs[worker].data())
                                       : dst_data + piece.dst_offset;
      if (channel_piece && p.has_add) {
        copy_rows(residual_rows + piece.first_channel, out_channels, piece_dst, piece.channels,
                  piece.pixels, piece.channels);
      } else if (copy_residual_per_piece) {
        std::memcpy(piece_dst, residual + piece.dst_offset,
                    piece.dst_md.get_size() * static_cast<size_t>(piece.tiles));
      }
      const OwnedTensor& piece_weights = channel_piece ? piece.weights : p.weights;
      const OwnedTensor& piece_bias = channel_piece ? piece.bias : p.bias;
      PieceData data = piece_data(src_data + piece.src_offset, piece_dst, piece_weights,
                                  p.has_bias ? &piece_bias : nullptr);
      if (weights_override != nullptr) data.weights = weights_override;
      data.tail = tail_of(p.tail);
      execute_piece(state, piece, worker, data);
      if (channel_piece) {
        copy_rows(piece_dst, piece.channels, dst_data + piece.first_channel, out_channels,
                  piece.pixels, piece.channels);
      }
    });
  } else {
    PieceData data = piece_data(src_data, dst_data, p.weights, p.has_bias ? &p.bias : nullptr);
    if (weights_override != nullptr) data.weights = weights_override;
    data.tail = tail_of(p.tail);
    execute_whole(state, p.primitive, p.args, p.primitive_src_md, p.primitive_dst_md,
                  p.scratchpad_md, data);
  }
  if (p.reorder_output) {
    wrap_dnnl("output reorder", [&] {
      p.output_reorder.execute(
          state.stream,
          point(p.conversions, kStagedOutput, p.primitive_dst_md, state.engine, dst_data),
          point(p.conversions, kOutput, output_md, state.engine, output));
      state.stream.wait();
    });
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
