// Linear / addmm plans (LinearPlan) on oneDNN's matmul, split into bands of rows (many rows:
// transformer tokens) or output column blocks (few rows: MLP batches).
#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"

#include <array>
#include <cstring>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/row_gemm.h"

namespace et_cpu_plugin {
namespace onednn {

Support supports_linear(const LinearParams& p, const PostOps& post_ops) {
  if (p.rows < 1 || p.in_features < 1 || p.out_features < 1) {
    return Support::no(
        "linear: rows " + std::to_string(p.rows) + ", in_features " +
        std::to_string(p.in_features) + ", out_features " + std::to_string(p.out_features) +
        " must be positive");
  }
  return check_post_ops(post_ops);
}

// Row counts up to `up_to` (below a row tile) on our row_gemm (kernels/row_gemm.h), the count
// read at each run, in blocks of up to kRowGemmMaxRows rows: one plan serves every such count, so
// a graph resized in place makes nothing for a new one (a oneDNN primitive per new count cost
// ~8 us of each resize per linear). Only where ProviderState::size_independent_plans. Up to
// kRowGemmMaxRows rows by default: above, row_gemm's steady state was ~2x oneDNN's (decoder, 6-31
// rows, AMD EPYC, under load); ET_CPU_VARIABLE_ROWS=all: every count below a tile, =0: none.
struct LinearVariableRows {
  std::array<std::shared_ptr<const RowGemm>, kRowGemmMaxRows> gemms;  // gemms[r - 1]: r rows
  int64_t k = 0;
  int64_t n = 0;
  int64_t up_to = 0;
};

struct LinearPlan::Impl {
  std::shared_ptr<ProviderState> state;
  dnnl::matmul primitive;
  std::string implementation;
  memory::desc scratchpad_md;
  memory::desc src_md;
  memory::desc dst_md;
  OwnedTensor weights;
  OwnedTensor bias;
  bool has_bias = false;
  bool has_add = false;
  std::optional<Activation> tail;  // run by the plan after each call (split_tail)
  // Work sharing: column blocks of the output, each with its own weights, or (`row_bands`) bands
  // of rows of the input and output that share the plan's weights; empty = one call.
  std::vector<Piece> pieces;
  bool row_bands = false;
  // A few rows (batch-1 heads): our own kernel instead of the primitive (row_gemm.h).
  std::optional<RowGemmRun> row_gemm;
  // Rows read at each run (a graph whose sizes vary): the whole op when `pieces` is empty, else
  // the rest of the rows after the row tiles, from row `rest_begin`.
  std::optional<LinearVariableRows> variable;
  int64_t rows = 0;  // prepared for
  int64_t rest_begin = 0;
  size_t weights_bytes = 0;
  mutable std::unordered_map<int, memory> args;  // the whole op's, made on the first run
  // The row tile's descriptor (tile_pd) and, once made, its primitive: the same at every row
  // count, so a plan prepared at another size takes them (prepare_linear's `previous`).
  std::optional<dnnl::matmul::primitive_desc> tile;
  dnnl::matmul tile_primitive;
};

LinearPlan::LinearPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

size_t LinearPlan::weights_bytes() const {
  return impl_->weights_bytes;
}
size_t LinearPlan::scratchpad_bytes() const {
  return impl_->scratchpad_md.get_size();
}
std::string LinearPlan::implementation() const {
  return impl_->implementation;
}
bool LinearPlan::has_row_tile() const {
  return impl_->tile.has_value();
}
int64_t LinearPlan::reads_rows_up_to() const {
  return impl_->variable.has_value() && impl_->pieces.empty() ? impl_->variable->up_to : 0;
}
size_t LinearPlan::pieces() const {
  if (impl_->row_gemm) return impl_->row_gemm->tasks;
  if (reads_rows_up_to() > 0) {
    const LinearVariableRows& v = *impl_->variable;
    return impl_->state->pieces_for(2.0 * static_cast<double>(impl_->rows * v.k * v.n),
                                    v.gemms[0]->groups());
  }
  return std::max<size_t>(1, impl_->pieces.size());
}

namespace {

// `rows` rows of x [rows, k] into y [rows, n] on `v`: units of (column group, block of rows),
// group-major so a task reads a group's weights for all its blocks in turn, shared out on the
// pool when the flops are worth it.
void run_variable_rows(ProviderState& state, const LinearVariableRows& v, int64_t rows,
                       const float* x, float* y, const float* residual) {
  if (rows < 1) return;
  const int64_t groups = v.gemms[0]->groups();
  const int64_t blocks = (rows + kRowGemmMaxRows - 1) / kRowGemmMaxRows;
  auto run = [&](int64_t first, int64_t last) {
    for (int64_t unit = first; unit < last; ++unit) {
      const int64_t group = unit / blocks;
      const int64_t block = unit % blocks;
      const int64_t begin = rows * block / blocks;  // blocks of rows / blocks <= 4 rows
      const int64_t end = rows * (block + 1) / blocks;
      v.gemms[static_cast<size_t>(end - begin - 1)]->run(
          x + begin * v.k, y + begin * v.n, residual ? residual + begin * v.n : nullptr, group,
          group + 1);
    }
  };
  const size_t tasks = state.pieces_for(2.0 * static_cast<double>(rows * v.k * v.n),
                                        groups * blocks);
  if (tasks < 2) {
    run(0, groups * blocks);
    return;
  }
  state.pool->run(tasks, [&](size_t index, int) {
    const auto [first, last] = slice_of(groups * blocks, tasks, index);
    run(first, last);
  });
}

}  // namespace

void LinearPlan::run(const float* input, float* output, const float* residual,
                     int64_t rows) const {
  const Impl& p = *impl_;
  ProviderState& state = *p.state;
  if (p.has_add && residual == nullptr) {
    throw ProviderError("linear plan: post-op add needs a residual tensor, got null");
  }
  if (p.row_gemm) {
    run_row_gemm(state, *p.row_gemm, input, output, residual);
    return;
  }
  if (reads_rows_up_to() > 0) {
    run_variable_rows(state, *p.variable, rows > 0 ? rows : p.rows, input, output, residual);
    return;
  }
  ThreadCountGuard threads(state.omp_threads);
  if (p.has_add && residual != output) {
    std::memcpy(output, residual, p.dst_md.get_size());
  }
  if (!p.pieces.empty()) {
    run_pieces(state, p.pieces, [&](const Piece& piece) {
      PieceData data =
          p.row_bands
              ? piece_data(input + piece.src_offset, output + piece.dst_offset, p.weights,
                           p.has_bias ? &p.bias : nullptr)
              : piece_data(input, output + piece.dst_offset, piece.weights,
                           p.has_bias ? &piece.bias : nullptr);
      data.tail = tail_of(p.tail);
      return data;
    });
    if (p.variable) {  // the rows after the tiles
      const LinearVariableRows& v = *p.variable;
      run_variable_rows(state, v, p.rows - p.rest_begin, input + p.rest_begin * v.k,
                        output + p.rest_begin * v.n,
                        residual ? residual + p.rest_begin * v.n : nullptr);
    }
    return;
  }
  PieceData data = piece_data(input, output, p.weights, p.has_bias ? &p.bias : nullptr);
  data.tail = tail_of(p.tail);
  execute_whole(state, p.primitive, p.args, p.src_md, p.dst_md, p.scratchpad_md, data);
}

namespace {

// Rows per band at least: below this oneDNN's brgemm runs short of rows to block over, and a
// column split (which keeps every row) is the better choice.
constexpr int64_t kLinearRows = 32;

// Splits a linear into bands of rows: each piece reads its rows of the input and writes the same
// rows of the output with the whole weight matrix, which the pieces share (the plan's, in the
// layout the whole op's primitive chose). Dense slices keep oneDNN's brgemm kernels, which a
// column block's strided output loses. Empty result: no split this way (too few rows, or a
// band's primitive would want another weight layout or kernel).
std::vector<Piece> split_linear_rows(ProviderState& state, const LinearParams& params,
                                     const dnnl::matmul::primitive_desc& whole,
                                     const dnnl::primitive_attr& attr, bool has_bias) {
  const int64_t m = params.rows;
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  const size_t count = state.pieces_for(2.0 * m * k * n, m / kLinearRows);
  const std::string whole_implementation = whole.impl_info_str();
  const memory::desc whole_weights = whole.weights_desc();
  return make_pieces(state, count, [&](size_t i, Piece& piece) {
    const auto [begin, end] = block_slice(m, kLinearRows, count, i);
    piece.src_md = plain_md({end - begin, k});
    piece.dst_md = plain_md({end - begin, n});
    piece.src_offset = static_cast<size_t>(begin * k);
    piece.dst_offset = static_cast<size_t>(begin * n);
    const memory::desc bias_md = has_bias ? plain_md({1, n}) : memory::desc();
    const dnnl::matmul::primitive_desc pd(state.engine, piece.src_md, any_md({k, n}), bias_md,
                                          piece.dst_md, attr);
    if (pd.weights_desc() != whole_weights || pd.impl_info_str() != whole_implementation) {
      return false;
    }
    set_primitive<dnnl::matmul>(piece, pd);
    return true;
  });
}

// Rows per tile of a linear run in row tiles (split_linear_tiles).
constexpr int64_t kLinearTile = kLinearRows;

// The tile primitive's descriptor of a linear (k, n, bias, post-ops), when the graph's sizes vary
// (ProviderState::size_independent_plans), row tiles are on and it runs brgemm: smaller row
// counts read their weights in its layout too, so every size shares them.
std::optional<dnnl::matmul::primitive_desc> tile_pd(ProviderState& state, int64_t k, int64_t n,
                                                    const memory::desc& bias_md,
                                                    const dnnl::primitive_attr& attr) {
  if (!state.pool || !state.size_independent_plans || !kernel_switched_on("ET_CPU_ROW_TILES")) {
    return std::nullopt;
  }
  dnnl::matmul::primitive_desc tile(state.engine, plain_md({kLinearTile, k}), any_md({k, n}),
                                    bias_md, plain_md({kLinearTile, n}), attr);
  if (std::string(tile.impl_info_str()).rfind("brg", 0) != 0) return std::nullopt;
  return tile;
}

// A linear of at least kLinearTile rows as bands of whole tiles of kLinearTile rows, every tile
// run by one primitive whose shape does not depend on the row count (so a graph compiled for a
// new size generates no kernel for it: oneDNN 3.2's matmul with a run-time M runs gemm:jit,
// 7-27% slower than brgemm), plus one piece for the last rows % kLinearTile rows (a kernel per
// distinct remainder, made once). The plan's weights take the tile primitive's layout, the same
// at every size. Empty (the plan goes the usual way) when the remainder would run the reference
// kernel, or when too few tiles would leave pool threads idle that column blocks would use.
std::vector<Piece> split_linear_tiles(ProviderState& state, const LinearParams& params,
                                      const dnnl::matmul::primitive_desc& tile,
                                      dnnl::matmul* tile_primitive,
                                      const dnnl::primitive_attr& attr, bool has_bias,
                                      bool rest_outside, std::string* implementation) {
  const int64_t m = params.rows;
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  if (m < kLinearTile) return {};
  const int64_t tiles = m / kLinearTile;
  const int64_t rest = rest_outside ? 0 : m % kLinearTile;  // else run by the caller
  const double flops = 2.0 * m * k * n;
  const size_t count = state.pieces_for(flops, tiles);
  if (count < 2 && state.pieces_for(flops, n / kLinearColumns) >= 2) {
    return {};  // too few tiles to share out: column blocks keep the pool's threads busy
  }
  const memory::desc bias_md = has_bias ? plain_md({1, n}) : memory::desc();
  *implementation = tile.impl_info_str();
  std::vector<Piece> pieces;
  std::optional<dnnl::matmul::primitive_desc> rest_pd;
  if (rest > 0) {
    try {
      rest_pd.emplace(state.engine, plain_md({rest, k}), tile.weights_desc(), bias_md,
                      plain_md({rest, n}), attr);
    } catch (const dnnl::error&) {
      return {};  // no kernel reads the tile's weight layout at this row count
    }
    if (std::string(rest_pd->impl_info_str()).rfind("ref", 0) == 0) return {};
  }
  if (!*tile_primitive) *tile_primitive = make_matmul(tile);  // else a previous size's
  for (size_t i = 0; i < count; ++i) {
    const auto [begin, end] = block_slice(tiles * kLinearTile, kLinearTile, count, i);
    Piece piece;
    piece.primitive = *tile_primitive;
    piece.scratchpad_md = tile.scratchpad_desc();
    piece.src_md = plain_md({kLinearTile, k});
    piece.dst_md = plain_md({kLinearTile, n});
    piece.src_offset = static_cast<size_t>(begin * k);
    piece.dst_offset = static_cast<size_t>(begin * n);
    piece.tiles = (end - begin) / kLinearTile;
    piece.src_tile = static_cast<size_t>(kLinearTile * k);
    piece.dst_tile = static_cast<size_t>(kLinearTile * n);
    pieces.push_back(std::move(piece));
  }
  if (rest_pd) {
    Piece piece;
    set_primitive<dnnl::matmul>(piece, *rest_pd);
    piece.src_md = plain_md({rest, k});
    piece.dst_md = plain_md({rest, n});
    piece.src_offset = static_cast<size_t>(tiles * kLinearTile * k);
    piece.dst_offset = static_cast<size_t>(tiles * kLinearTile * n);
    pieces.push_back(std::move(piece));
  }
  for (const Piece& piece : pieces) state.reserve_piece_scratchpad(piece.scratchpad_md);
  *implementation += pieces_note(pieces.size()) + " (row tiles of " +
                     std::to_string(kLinearTile) + ")";
  return pieces;
}

// Splits a linear into column blocks of its output: each piece reads the whole input, owns its
// block of the weights (reordered once here, so the weights are not duplicated) and writes its
// columns of the row-major output. Empty result: the plan stays whole.
std::vector<Piece> split_linear(
    ProviderState& state,
    const LinearParams& params,
    const memory::desc& src_md,
    const float* weight,
    const float* bias,
    const dnnl::primitive_attr& attr,
    const std::string& whole_implementation) {
  const int64_t m = params.rows;
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  const size_t count = state.pieces_for(2.0 * m * k * n, n / kLinearColumns);
  return make_pieces(state, count, [&](size_t i, Piece& piece) {
    const auto [begin, end] = block_slice(n, kLinearColumns, count, i);
    const int64_t width = end - begin;
    piece.src_md = src_md;
    piece.dst_md = memory::desc({m, width}, memory::data_type::f32, Dims{n, 1});
    piece.dst_offset = static_cast<size_t>(begin);
    // This block of the weight as a logical [K, width] matrix.
    const memory::desc user_weight_md = params.weight_is_k_by_n
        ? memory::desc({k, width}, memory::data_type::f32, Dims{n, 1})
        : memory::desc({k, width}, memory::data_type::f32, Dims{1, k});
    const float* user_weight = params.weight_is_k_by_n ? weight + begin : weight + begin * k;
    const memory::desc bias_md = bias ? plain_md({1, width}) : memory::desc();
    const dnnl::matmul::primitive_desc pd(state.engine, piece.src_md, any_md({k, width}),
                                          bias_md, piece.dst_md, attr);
    // A column block writes a strided output, which oneDNN's brgemm matmul refuses (2.6 and
    // 3.2); its jit GEMM takes it at about the same speed. Only the reference kernel is not
    // worth it.
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0 &&
        whole_implementation.rfind("ref", 0) != 0) {
      return false;
    }
    set_primitive<dnnl::matmul>(piece, pd);
    piece.weights = reorder_constant(state, user_weight_md, user_weight, pd.weights_desc());
    if (bias) {
      piece.bias = reorder_constant(state, plain_md({1, width}), bias + begin, pd.bias_desc());
    }
    return true;
  });
}

// The variable-rows kernels of a linear (LinearVariableRows) for `rows` rows, on weights packed
// once in the weight cache, or none: a static graph, more rows than ET_CPU_VARIABLE_ROWS lets
// them take, or row_gemm not taking the post-ops or this CPU.
std::optional<LinearVariableRows> variable_rows(ProviderState& state, const LinearParams& params,
                                                int64_t rows, const float* weight,
                                                const float* bias, const PostOps& post_ops) {
  const SwitchReach reach = switch_reach("ET_CPU_VARIABLE_ROWS");
  const int64_t up_to = reach == SwitchReach::kNever        ? 0
                        : reach == SwitchReach::kEverywhere ? kLinearTile - 1
                                                            : kRowGemmMaxRows;
  if (!state.size_independent_plans || rows > up_to ||
      !row_gemm_supports(kRowGemmMaxRows, post_ops)) {
    return std::nullopt;
  }
  LinearVariableRows v;
  v.up_to = up_to;
  v.k = params.in_features;
  v.n = params.out_features;
  std::shared_ptr<const RowGemm::Packed> packed = cached_row_gemm_weights(
      state.weight_cache.get(), v.k, v.n, weight, params.weight_is_k_by_n, bias);
  for (int64_t r = 1; r <= kRowGemmMaxRows; ++r) {
    v.gemms[static_cast<size_t>(r - 1)] = std::make_shared<RowGemm>(r, packed, post_ops);
  }
  return v;
}

}  // namespace

LinearPlan Provider::prepare_linear(const LinearParams& params, const float* weight,
                                    const float* bias, const PostOps& post_ops,
                                    const LinearPlan* previous) {
  const Support support = supports_linear(params, post_ops);
  if (!support.ok) {
    throw ProviderError("prepare_linear: " + support.reason);
  }
  if (weight == nullptr) {
    throw ProviderError("prepare_linear: weight is null");
  }
  ProviderState& state = *state_;
  ThreadCountGuard threads(state.omp_threads);
  const int64_t m = params.rows;
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  // The weight as a logical [K, N] matrix: plain for addmm's mat2, transposed view for linear's.
  const memory::desc user_weight_md = params.weight_is_k_by_n
      ? plain_md({k, n})
      : memory::desc({k, n}, memory::data_type::f32, Dims{1, k});

  if (m < kLinearTile) {  // a graph whose sizes vary: one plan for every count below a tile
    std::optional<LinearVariableRows> variable =
        variable_rows(state, params, m, weight, bias, post_ops);
    if (variable) {
      auto impl = std::make_shared<LinearPlan::Impl>();
      impl->state = state_;
      impl->rows = m;
      impl->has_add = has_add(post_ops);
      impl->weights_bytes = variable->gemms[0]->weights_bytes();
      state.weights_bytes += impl->weights_bytes;
      impl->variable = std::move(variable);
      impl->implementation = "row_gemm:avx512 (rows read at each run)";
      return LinearPlan(std::move(impl));
    }
  }
  if (row_gemm_supports(m, post_ops)) {
    auto impl = std::make_shared<LinearPlan::Impl>();
    impl->state = state_;
    impl->row_gemm = prepare_row_gemm(state, m, k, n, weight, params.weight_is_k_by_n, bias,
                                      post_ops, &impl->implementation);
    impl->has_add = has_add(post_ops);
    impl->weights_bytes = impl->row_gemm->gemm->weights_bytes();
    return LinearPlan(std::move(impl));
  }
  return wrap_dnnl("prepare_linear", [&] {
    using Impl = LinearPlan::Impl;
    auto impl = std::make_shared<Impl>();
    impl->state = state_;
    impl->src_md = plain_md({m, k});
    impl->dst_md = plain_md({m, n});
    const memory::desc bias_md = bias ? plain_md({1, n}) : memory::desc();
    // Plain or row-strided outputs: a trailing sigmoid / SiLU always suits the plan's kernel.
    const SplitPostOps split = split_tail(post_ops);
    impl->tail = split.tail;
    impl->has_bias = bias != nullptr;
    impl->has_add = has_add(post_ops);
    // A previous size's row tile (same weights, bias and post-ops: the same descriptor), whose
    // primitive it made already; generating them again cost 150-220 us per resize in a decoder.
    const bool reuse = previous != nullptr && previous->impl_->tile.has_value();
    const std::optional<dnnl::matmul::primitive_desc> tile =
        reuse ? previous->impl_->tile : tile_pd(state, k, n, bias_md, make_attr(split.primitive));
    if (reuse) impl->tile_primitive = previous->impl_->tile_primitive;
    impl->tile = tile;
    impl->rows = m;
    if (tile) {
      // The rows after the last tile on row_gemm (a previous size's kernels, or made here: no
      // primitive per remainder).
      std::optional<LinearVariableRows> rest;
      if (m > kLinearTile && m % kLinearTile != 0) {
        rest = reuse && previous->impl_->variable &&
                       previous->impl_->variable->up_to >= m % kLinearTile
                   ? previous->impl_->variable
                   : variable_rows(state, params, m % kLinearTile, weight, bias, post_ops);
      }
      impl->pieces = split_linear_tiles(state, params, *tile, &impl->tile_primitive,
                                        make_attr(split.primitive), bias != nullptr,
                                        rest.has_value(), &impl->implementation);
      if (!impl->pieces.empty() && rest) {
        impl->variable = std::move(rest);
        impl->rest_begin = m - m % kLinearTile;
        impl->implementation += ", the last " + std::to_string(m % kLinearTile) +
                                " rows on row_gemm:avx512";
      }
    }
    if (!impl->pieces.empty()) {  // no primitive of m rows: nothing here depends on the size
      const size_t weights_before = state.weights_bytes;
      impl->row_bands = true;
      impl->implementation += split.note();
      impl->weights = reorder_constant(state, user_weight_md, weight, tile->weights_desc());
      if (bias) impl->bias = reorder_constant(state, bias_md, bias, bias_md);
      if (impl->variable) state.weights_bytes += impl->variable->gemms[0]->weights_bytes();
      impl->weights_bytes = state.weights_bytes - weights_before;
      return LinearPlan(std::move(impl));
    }
    // Fewer rows than a tile: the weights in the tile's layout when brgemm takes it, so the
    // sizes share them. Asked first (one descriptor, not two, per new size: each costs ~5-10 us
    // of a resize); the layout oneDNN would choose otherwise.
    std::optional<dnnl::matmul::primitive_desc> fixed;
    if (tile) {
      try {
        fixed.emplace(state.engine, impl->src_md, tile->weights_desc(), bias_md, impl->dst_md,
                      make_attr(split.primitive));
        if (std::string(fixed->impl_info_str()).rfind("brg", 0) != 0) fixed.reset();
      } catch (const dnnl::error&) {
        fixed.reset();  // no kernel reads that layout at this row count
      }
    }
    dnnl::matmul::primitive_desc pd =
        fixed ? *fixed
              : dnnl::matmul::primitive_desc(state.engine, impl->src_md, any_md({k, n}), bias_md,
                                             impl->dst_md, make_attr(split.primitive));
    impl->implementation = pd.impl_info_str();
    impl->has_bias = bias != nullptr;
    impl->has_add = has_add(post_ops);
    const size_t weights_before = state.weights_bytes;
    const bool brgemm = impl->implementation.rfind("brg", 0) == 0;
    if (brgemm) {
      impl->pieces =
          split_linear_rows(state, params, pd, make_attr(split.primitive), bias != nullptr);
      impl->row_bands = !impl->pieces.empty();
    }
    if (!impl->row_bands) {
      impl->pieces = split_linear(state, params, impl->src_md, weight, bias,
                                  make_attr(split.primitive), impl->implementation);
    }
    impl->implementation += split.note();
    impl->implementation += impl->row_bands ? pieces_note(impl->pieces.size()) + " (row bands)"
                                            : pieces_note(impl->pieces.size());
    if (impl->pieces.empty()) {
      // Only now: a split plan never runs the whole op, and generating its kernel costs
      // ~100 us of every compile (each new size of a dynamic graph).
      impl->primitive = make_matmul(pd);
      impl->scratchpad_md = pd.scratchpad_desc();
      state.reserve_scratchpad(impl->scratchpad_md);
    }
    if (impl->pieces.empty() || impl->row_bands) {  // the weights of the whole op
      impl->weights = reorder_constant(state, user_weight_md, weight, pd.weights_desc());
      if (bias) {
        impl->bias = reorder_constant(state, plain_md({1, n}), bias, pd.bias_desc());
      }
    }
    impl->weights_bytes = state.weights_bytes - weights_before;
    return LinearPlan(std::move(impl));
  });
}

}  // namespace onednn
}  // namespace et_cpu_plugin
