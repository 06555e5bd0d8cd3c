// Split plans' pieces: running primitives on the pool's threads, slicing ops, making splits.
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/pointwise_conv.h"
#include "backends/cpu/runtime/providers/optimized/kernels/row_gemm.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_activations.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// Bytes of `md` if it held its elements and nothing else.
size_t dense_bytes(const memory::desc& md) {
  return static_cast<size_t>(product(md.get_dims())) * sizeof(float);
}

// The tail over `md`'s elements at `dst`, in place (tail_fits(md) was checked at prepare).
void apply_tail(const Activation& tail, const memory::desc& md, float* dst) {
  if (md.get_size() == dense_bytes(md)) {
    apply_vector_activation(tail, dst, dst, dense_bytes(md) / sizeof(float));
    return;
  }
  const Dims dims = md.get_dims();
  const Dims strides = md.get_strides();
  for (int64_t row = 0; row < dims[0]; ++row) {
    float* at = dst + row * strides[0];
    apply_vector_activation(tail, at, at, static_cast<size_t>(dims[1]));
  }
}

// Runs `primitive` on `stream` with `scratchpad`, re-pointing the memory objects in `args` (made
// on first use) at `data`. One thread uses `args` at a time, so no lock.
void execute_with(ProviderState& state, const dnnl::primitive& primitive,
                  std::unordered_map<int, memory>& args, const memory::desc& src_md,
                  const memory::desc& dst_md, const memory::desc& scratchpad_md,
                  dnnl::stream& stream, void* scratchpad, const PieceData& data) {
  point(args, DNNL_ARG_SRC, src_md, state.engine, data.src);
  point(args, DNNL_ARG_DST, dst_md, state.engine, data.dst);
  point(args, DNNL_ARG_SCRATCHPAD, scratchpad_md, state.engine, scratchpad);
  if (data.weights != nullptr) {
    point(args, DNNL_ARG_WEIGHTS, *data.weights_md, state.engine, data.weights);
  }
  if (data.bias != nullptr) {
    point(args, DNNL_ARG_BIAS, *data.bias_md, state.engine, data.bias);
  }
  primitive.execute(stream, args);
  stream.wait();
  if (data.tail != nullptr) apply_tail(*data.tail, dst_md, data.dst);
}

const float* data_of(const OwnedTensor& tensor) {
  return tensor.bytes ? static_cast<const float*>(tensor.bytes->data()) : nullptr;
}

}  // namespace

SplitPostOps split_tail(const PostOps& post_ops, bool keep) {
  SplitPostOps split{post_ops, std::nullopt};
  if (keep || post_ops.empty()) return split;
  const PostOp& last = post_ops.back();
  if (last.kind == PostOp::Kind::kActivation && has_vector_activation(last.activation)) {
    split.tail = last.activation;
    split.primitive.pop_back();
  }
  return split;
}

bool tail_fits(const memory::desc& md) {
  if (md.get_data_type() != memory::data_type::f32 ||
      md.get_format_kind() != dnnl::memory::format_kind::blocked) {
    return false;
  }
  if (md.get_size() == dense_bytes(md)) return true;
  const Dims strides = md.get_strides();
  return md.get_ndims() == 2 && md.get_inner_nblks() == 0 && strides[1] == 1 &&
         strides[0] >= md.get_dims()[1];
}

memory& point(std::unordered_map<int, memory>& memories, int key, const memory::desc& md,
              const dnnl::engine& engine, const void* data) {
  auto found = memories.find(key);
  if (found == memories.end()) {
    return memories.emplace(key, memory(md, engine, const_cast<void*>(data))).first->second;
  }
  // Re-pointing is not free: oneDNN 3.2 zero-fills the padding of a padded layout (blocked
  // weights) on every set_data_handle. The arena and the weights mostly stay put between runs.
  if (found->second.get_data_handle() != data) {
    found->second.set_data_handle(const_cast<void*>(data));
  }
  return found->second;
}

void execute_on_worker(ProviderState& state, const dnnl::primitive& primitive,
                       std::unordered_map<int, memory>& args, const memory::desc& src_md,
                       const memory::desc& dst_md, const memory::desc& scratchpad_md, int worker,
                       const PieceData& data) {
  const bool pooled = !state.piece_streams.empty();
  const size_t index = static_cast<size_t>(worker);
  execute_with(state, primitive, args, src_md, dst_md, scratchpad_md,
               pooled ? state.piece_streams[index] : state.stream,
               pooled ? state.piece_scratchpads[index].data() : state.scratchpad.data(), data);
}

void execute_whole(ProviderState& state, const dnnl::primitive& primitive,
                   std::unordered_map<int, memory>& args, const memory::desc& src_md,
                   const memory::desc& dst_md, const memory::desc& scratchpad_md,
                   const PieceData& data) {
  wrap_dnnl("execute", [&] {
    execute_with(state, primitive, args, src_md, dst_md, scratchpad_md, state.stream,
                 state.scratchpad.data(), data);
  });
}

void WholeOp::run(const float* input, float* output) const {
  ThreadCountGuard threads(state->omp_threads);
  PieceData data;
  data.src = input;
  data.dst = output;
  execute_whole(*state, primitive, args, src, dst, scratchpad_md, data);
}

void execute_piece(ProviderState& state, const Piece& piece, int worker, const PieceData& data) {
  wrap_dnnl("execute piece", [&] {
    PieceData tile = data;
    for (int64_t t = 0; t < piece.tiles; ++t) {
      execute_on_worker(state, piece.primitive, piece.args, piece.src_md, piece.dst_md,
                        piece.scratchpad_md, worker, tile);
      tile.src += piece.src_tile;
      tile.dst += piece.dst_tile;
    }
  });
}

void copy_rows(const float* from, int64_t from_stride, float* to, int64_t to_stride,
               int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(to + r * to_stride, from + r * from_stride, static_cast<size_t>(width) * 4);
  }
}

void run_pieces(ProviderState& state, const std::vector<Piece>& pieces,
                const std::function<PieceData(const Piece&)>& data) {
  state.pool->run(pieces.size(), [&](size_t index, int worker) {
    execute_piece(state, pieces[index], worker, data(pieces[index]));
  });
}

std::string pieces_note(size_t count) {
  return count > 1 ? ", " + std::to_string(count) + " pieces" : std::string();
}

namespace {

// The work a RowGemm split weighs (against min_task_flops, a compute-bound core's ~15 us): a few
// rows read every weight once for 2 x rows flops, so the weight stream sets its time, ~28 GB/s
// on one core (Intel Xeon, MobileNetV3's heads) against ~64 GFLOP/s: about 9 flops' time per
// float read. kRowGemmFlopsPerWeight counts 8 (rows <= 4: at least 2 x rows).
constexpr double kRowGemmFlopsPerWeight = 8.0;

}  // namespace

bool row_gemm_stream_split() {
  return kernel_switched_on("ET_CPU_ROW_GEMM_STREAM_SPLIT");
}

double row_gemm_split_work(int64_t rows, int64_t k, int64_t n, bool stream_split) {
  const double per_weight = stream_split
                                ? std::max(2.0 * static_cast<double>(rows), kRowGemmFlopsPerWeight)
                                : 2.0 * static_cast<double>(rows);
  return per_weight * static_cast<double>(k) * static_cast<double>(n);
}

RowGemmRun prepare_row_gemm(ProviderState& state, int64_t rows, int64_t k, int64_t n,
                            const float* weight, bool weight_is_k_by_n, const float* bias,
                            const PostOps& post_ops, std::string* implementation) {
  RowGemmRun run;
  auto gemm = std::make_shared<RowGemm>(
      rows, cached_row_gemm_weights(state.weight_cache.get(), k, n, weight, weight_is_k_by_n, bias),
      post_ops);
  run.tasks =
      state.pieces_for(row_gemm_split_work(rows, k, n, row_gemm_stream_split()), gemm->groups());
  state.weights_bytes += gemm->weights_bytes();
  run.gemm = std::move(gemm);
  *implementation = "row_gemm:avx512" + pieces_note(run.tasks);
  return run;
}

void run_row_gemm(ProviderState& state, const RowGemmRun& run, const float* x, float* y,
                  const float* residual) {
  const RowGemm& gemm = *run.gemm;
  run_in_slices(state.pool.get(), run.tasks, gemm.groups(), [&](int64_t first, int64_t last, int) {
    gemm.run(x, y, residual, first, last);
  });
}

void run_pointwise(ProviderState& state, const PointwiseRun& run, const float* x, float* y,
                   const float* residual, const float* weights) {
  const PointwiseConv& conv = *run.conv;
  const int64_t k = conv.in_channels();
  const int64_t n = conv.out_channels();
  const int64_t groups = pointwise_groups(n);
  // Column groups [first, last) over pixels [p0, p1): every path's one call of the stream (x is
  // read when called: the gathered pixels, when there are).
  auto stream = [&](int64_t p0, int64_t p1, int64_t first, int64_t last) {
    conv.run_stream(x + p0 * k, p1 - p0, y + p0 * n,
                    residual != nullptr ? residual + p0 * n : nullptr, first, last, weights);
  };
  if (run.by_pixels) {
    const int64_t step = std::max<int64_t>(1, run.pixel_step);
    const int64_t units = (run.pixels + step - 1) / step;
    run_in_slices(state.pool.get(), run.tasks, units, [&](int64_t first_unit, int64_t last_unit,
                                                          int) {
      stream(first_unit * step, std::min(run.pixels, last_unit * step), 0, groups);
    });
    return;
  }
  if (run.gathered != nullptr) {
    float* to = run.gathered->data();
    const ConvWindow& w = run.window;
    for (int64_t image = 0; image < run.batch; ++image) {
      for (int64_t oh = 0; oh < w.out_h; ++oh) {
        const float* row = x + ((image * w.in_h + oh * w.stride_h) * w.in_w) * k;
        for (int64_t ow = 0; ow < w.out_w; ++ow, to += k) {
          std::memcpy(to, row + ow * w.stride_w * k, static_cast<size_t>(k) * sizeof(float));
        }
      }
    }
    x = run.gathered->data();
  }
  if (run.weighted) {
    // Each task's share of the groups' vectors x pixels, in group order; a share's start is
    // cut inside a group on a multiple of that group's tile (the nearest).
    int64_t total = 0;
    for (int64_t g = 0; g < groups; ++g) total += pointwise_group_vectors(n, g) * run.pixels;
    const int64_t tasks = static_cast<int64_t>(run.tasks);
    // Where task t's share starts: (group, first pixel); (groups, 0) past the last.
    auto start_of = [&](int64_t t) -> std::pair<int64_t, int64_t> {
      int64_t left = total * t / tasks;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t v = pointwise_group_vectors(n, g);
        if (left < v * run.pixels) {
          const int64_t tile = pointwise_tile_pixels(v);
          const int64_t pixel = (left / v + tile / 2) / tile * tile;
          if (pixel >= run.pixels) return {g + 1, 0};
          return {g, pixel};
        }
        left -= v * run.pixels;
      }
      return {groups, 0};
    };
    run_tasks(state.pool.get(), run.tasks, [&](size_t task, int) {
      auto [g, p0] = start_of(static_cast<int64_t>(task));
      const auto [end_group, end_pixel] = start_of(static_cast<int64_t>(task) + 1);
      if (p0 > 0) {  // the rest of a group an earlier share began
        const int64_t p1 = g == end_group ? end_pixel : run.pixels;
        if (p1 > p0) stream(p0, p1, g, g + 1);
        if (g == end_group) return;
        ++g;
      }
      if (g < end_group) stream(0, run.pixels, g, end_group);
      if (end_pixel > 0 && end_group < groups) stream(0, end_pixel, end_group, end_group + 1);
    });
    return;
  }
  if (!run.group_halves) {
    run_in_slices(state.pool.get(), run.tasks, groups, [&](int64_t first, int64_t last, int) {
      stream(0, run.pixels, first, last);
    });
    return;
  }
  // Units are half groups: unit 2g is group g's pixels [0, middle), unit 2g + 1 the rest.
  const int64_t half = run.pixels / 2;
  const int64_t middle =
      half >= kPointwiseTileMultiple ? half / kPointwiseTileMultiple * kPointwiseTileMultiple
                                     : half;
  auto half_group = [&](int64_t unit) {
    const int64_t g = unit / 2;
    stream(unit % 2 == 0 ? 0 : middle, unit % 2 == 0 ? middle : run.pixels, g, g + 1);
  };
  run_in_slices(state.pool.get(), run.tasks, 2 * groups, [&](int64_t first, int64_t last, int) {
    if (first % 2 == 1 && first < last) half_group(first++);
    const int64_t whole_end = last / 2;
    if (first / 2 < whole_end) {
      stream(0, run.pixels, first / 2, whole_end);
      first = 2 * whole_end;
    }
    if (first < last) half_group(first);
  });
}

PieceData piece_data(const float* src, float* dst, const OwnedTensor& weights,
                     const OwnedTensor* bias) {
  PieceData data;
  data.src = src;
  data.dst = dst;
  data.weights_md = &weights.md;
  data.weights = data_of(weights);
  if (bias != nullptr) {
    data.bias_md = &bias->md;
    data.bias = data_of(*bias);
  }
  return data;
}

std::pair<int64_t, int64_t> slice_of(int64_t units, size_t count, size_t index) {
  const int64_t n = static_cast<int64_t>(count);
  const int64_t i = static_cast<int64_t>(index);
  return {units * i / n, units * (i + 1) / n};
}

std::pair<int64_t, int64_t> block_slice(int64_t total, int64_t block, size_t count, size_t index) {
  const auto [begin, end] = slice_of(total / block, count, index);
  return {begin * block, index + 1 == count ? total : end * block};
}

int outermost_dim(const memory::desc& md) {
  const Dims dims = md.get_dims();
  const Dims strides = md.get_strides();
  int best = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] > 1 && (best < 0 || strides[i] > strides[static_cast<size_t>(best)])) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

memory::desc slice_dim(const memory::desc& md, int dim, int64_t begin, int64_t end,
                       size_t* offset) {
  Dims piece = md.get_dims();
  if (piece[dim] == 1) {
    *offset = 0;
    return md;
  }
  const Dims strides = md.get_strides();
  piece[dim] = end - begin;
  *offset = static_cast<size_t>(begin * strides[dim]);
  return memory::desc(piece, memory::data_type::f32, strides);
}

OuterSlices outer_slices(ProviderState& state, const memory::desc& dst,
                         const std::vector<memory::desc>& srcs, int excluded,
                         double flops_per_element) {
  OuterSlices slices;
  const int split = outermost_dim(dst);
  if (split < 0 || split == excluded) return slices;
  for (const memory::desc& md : srcs) {
    if (md.get_dims()[split] != 1 && outermost_dim(md) != split) return slices;
  }
  const Dims dims = dst.get_dims();
  slices.dim = split;
  slices.units = dims[split];
  slices.count = state.pieces_for(product(dims) * flops_per_element, dims[split]);
  return slices;
}

memory::desc OuterSlices::slice(const memory::desc& md, size_t index, size_t* offset) const {
  const auto [begin, end] = slice_of(units, count, index);
  return slice_dim(md, dim, begin, end, offset);
}

std::vector<Piece> make_pieces(ProviderState& state, size_t count,
                               const std::function<bool(size_t index, Piece& piece)>& make) {
  if (count < 2) {
    return {};
  }
  const size_t weights_before = state.weights_bytes;
  std::vector<Piece> pieces;
  try {
    for (size_t i = 0; i < count; ++i) {
      Piece piece;
      if (!make(i, piece)) {
        pieces.clear();
        break;
      }
      pieces.push_back(std::move(piece));
    }
  } catch (const dnnl::error&) {
    pieces.clear();
  }
  if (pieces.empty()) {
    state.weights_bytes = weights_before;
    return {};
  }
  for (const Piece& piece : pieces) {
    state.reserve_piece_scratchpad(piece.scratchpad_md);
  }
  return pieces;
}

namespace {

// The matmul primitives plans made in this process (count_matmul_primitive): their operands,
// kernel and post-ops, at most kMatmulShapes of them (beyond that, new ones count as new).
struct MatmulShape {
  memory::desc src, weights, bias, dst;
  std::string kernel;
};
constexpr size_t kMatmulShapes = 4096;
std::mutex matmul_shapes_mutex;
std::vector<MatmulShape>& matmul_shapes() {
  static std::vector<MatmulShape> shapes;
  return shapes;
}
std::atomic<uint64_t> matmul_primitives_new{0};
std::atomic<uint64_t> matmul_primitives_reused{0};

// The pd's kernel and its post-ops (kinds, algorithms and their parameters) as text.
std::string kernel_of(const dnnl::matmul::primitive_desc& pd) {
  std::string key = pd.impl_info_str();
  const dnnl::post_ops ops = pd.get_primitive_attr().get_post_ops();
  for (int i = 0; i < ops.len(); ++i) {
    key += "|" + std::to_string(static_cast<int>(ops.kind(i)));
    if (ops.kind(i) == dnnl::primitive::kind::eltwise) {
      dnnl::algorithm algorithm;
      float alpha = 0.f;
      float beta = 0.f;
      ops.get_params_eltwise(i, algorithm, alpha, beta);
      key += ":" + std::to_string(static_cast<int>(algorithm)) + ":" + std::to_string(alpha) +
             ":" + std::to_string(beta);
    }
  }
  return key;
}

}  // namespace

void count_matmul_primitive(const dnnl::matmul::primitive_desc& pd) {
  MatmulShape shape{pd.src_desc(), pd.weights_desc(), pd.bias_desc(), pd.dst_desc(),
                    kernel_of(pd)};
  std::lock_guard<std::mutex> lock(matmul_shapes_mutex);
  std::vector<MatmulShape>& shapes = matmul_shapes();
  for (const MatmulShape& seen : shapes) {
    if (seen.kernel == shape.kernel && seen.src == shape.src && seen.dst == shape.dst &&
        seen.weights == shape.weights && seen.bias == shape.bias) {
      ++matmul_primitives_reused;
      return;
    }
  }
  ++matmul_primitives_new;
  if (shapes.size() < kMatmulShapes) shapes.push_back(std::move(shape));
}

dnnl::matmul make_matmul(const dnnl::matmul::primitive_desc& pd) {
  count_matmul_primitive(pd);
  return dnnl::matmul(pd);
}

}  // namespace onednn
}  // namespace et_cpu_plugin

// Matmul primitives the plans made over the process (the loader's matmul_primitive_stats): of a
// shape new to the process (oneDNN generated a kernel) and of one seen before.
extern "C" {

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_matmul_primitives_new() {
  return et_cpu_plugin::onednn::matmul_primitives_new.load();
}

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_matmul_primitives_reused() {
  return et_cpu_plugin::onednn::matmul_primitives_reused.load();
}

}  // extern "C"
