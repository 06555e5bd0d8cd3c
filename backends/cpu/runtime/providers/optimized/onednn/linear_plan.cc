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

// Rows per small tile: counts above kRowGemmMaxRows and below a row tile run in whole tiles of
// this many rows on one oneDNN primitive (SmallRowTiles), the rest on row_gemm.
constexpr int64_t kSmallTile = 8;
// Small tiles a count below a row tile (32 rows) holds at most.
constexpr int64_t kSmallTilesMax = 3;

// Whole tiles of kSmallTile rows on brgemm primitives made once (their shapes do not depend on
// the row count), reading the weights in the row tile's layout: piece t runs rows [8t, 8t + 8),
// shared out on the pool when the flops are worth it; else q tiles run as one call of whole[q - 1]
// (8q rows: one primitive call instead of q).
struct SmallRowTiles {
  std::vector<Piece> pieces;  // kSmallTilesMax, one primitive, each its own memory objects
  std::vector<Piece> whole;   // whole[q - 1]: 8q rows, q = 1 to kSmallTilesMax (empty: none)
  OwnedTensor weights;
  OwnedTensor bias;
  bool has_bias = false;
  std::optional<Activation> tail;  // run on each tile's rows after it (split_tail)
  int64_t n = 0;
};

// Row counts up to `up_to` (below a row tile) read at each run: on our row_gemm
// (kernels/row_gemm.h) in blocks of up to kRowGemmMaxRows rows (kRowGemmWideRows when `wide`: a
// weight of 2 MiB or more, row_gemm_wide_rows, takes every count that way, for good), or, above
// kRowGemmMaxRows rows when `small` is set, whole small tiles of kSmallTile rows on oneDNN and
// the rest (1-7 rows) on row_gemm. One plan serves every such count, so a graph resized in place makes nothing for a new
// one (a oneDNN primitive per new count cost ~8 us of each resize per linear). Only where
// ProviderState::size_independent_plans. The small tiles are made by default, but they take the
// counts above kRowGemmMaxRows for good (`kept_up_to`) only with ET_CPU_SMALL_ROW_TILES=all: the
// rest after them on row_gemm costs more than a primitive of the count in the steady state (12
// rows: ~2x the decoder's time, Xeon, under load), so by default they stand in for the first
// call at a new count only, and a call again at that count prepares its primitive
// (prepare_linear's `first_at_size`; ET_CPU_SMALL_ROW_TILES=0: no small tiles, a primitive at the
// first call). ET_CPU_VARIABLE_ROWS=all: every count below a tile on row_gemm, for good; =0: none.
struct LinearVariableRows {
  // gemms[r - 1]: r rows; up to kRowGemmMaxRows, or kRowGemmWideRows when `wide`.
  std::array<std::shared_ptr<const RowGemm>, kRowGemmWideRows> gemms;
  std::shared_ptr<const SmallRowTiles> small;
  // Every count below a row tile on row_gemm in blocks of up to kRowGemmWideRows rows, for good,
  // no small tiles: weights streamed from L3 or memory at every call (row_gemm_wide_rows), which
  // each block reads once over the pool's threads (a small tile of 8 rows read them on one).
  bool wide = false;
  int64_t k = 0;
  int64_t n = 0;
  int64_t up_to = 0;
  // Its split weighed as a RowGemm run's (row_gemm_split_work, ET_CPU_ROW_GEMM_STREAM_SPLIT read
  // when made): a batch-1 head shares out its weight stream as a static graph's does.
  bool stream_split = false;
  int64_t kept_up_to = 0;  // the counts it takes for good, 1 to this (<= up_to)

  // Whether it takes `rows` for good: 1 to kept_up_to, and the counts its small tiles cover with
  // no rest on row_gemm (multiples of kSmallTile), which run as fast as a primitive of the count
  // (steady state level at 8, 16 and 24 rows on the Xeon): a call again there prepares nothing.
  bool keeps(int64_t rows) const {
    return rows <= kept_up_to || (small && rows <= up_to && rows % kSmallTile == 0);
  }
  // Rows per row_gemm block.
  int64_t block_rows() const { return wide ? kRowGemmWideRows : kRowGemmMaxRows; }
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
  // Its rows after the row tiles run in small tiles standing in for a primitive of their count
  // (a first call at this size: LinearVariableRows::kept_up_to).
  bool stands_in = false;
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
bool LinearPlan::keeps_rows(int64_t rows) const {
  return impl_->variable.has_value() && impl_->pieces.empty() && impl_->variable->keeps(rows);
}
bool LinearPlan::stands_in() const {
  return impl_->stands_in;
}
size_t LinearPlan::pieces() const {
  if (impl_->row_gemm) return impl_->row_gemm->tasks;
  if (reads_rows_up_to() > 0) {
    const LinearVariableRows& v = *impl_->variable;
    return impl_->state->pieces_for(row_gemm_split_work(impl_->rows, v.k, v.n, v.stream_split),
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
  const int64_t blocks = (rows + v.block_rows() - 1) / v.block_rows();
  auto run = [&](int64_t first, int64_t last, int) {
    for (int64_t unit = first; unit < last; ++unit) {
      const int64_t group = unit / blocks;
      const int64_t block = unit % blocks;
      const int64_t begin = rows * block / blocks;  // blocks of rows / blocks <= block_rows()
      const int64_t end = rows * (block + 1) / blocks;
      v.gemms[static_cast<size_t>(end - begin - 1)]->run(
          x + begin * v.k, y + begin * v.n, residual ? residual + begin * v.n : nullptr, group,
          group + 1);
    }
  };
  const size_t tasks =
      state.pieces_for(row_gemm_split_work(rows, v.k, v.n, v.stream_split), groups * blocks);
  run_in_slices(state.pool.get(), tasks, groups * blocks, run);
}

// `rows` rows (up to v.up_to) on `v`: whole small tiles first when it has them, then the rest on
// row_gemm.
void run_rows_read(ProviderState& state, const LinearVariableRows& v, int64_t rows,
                   const float* x, float* y, const float* residual) {
  if (!v.small || v.wide || rows < kSmallTile) {
    run_variable_rows(state, v, rows, x, y, residual);
    return;
  }
  const SmallRowTiles& s = *v.small;
  const int64_t tiles = std::min(rows / kSmallTile, kSmallTilesMax);
  if (residual != nullptr && residual != y) {  // the primitive adds into its destination
    std::memcpy(y, residual, static_cast<size_t>(tiles * kSmallTile * v.n) * sizeof(float));
  }
  ThreadCountGuard threads(state.omp_threads);
  auto tile = [&](int64_t t, int worker) {
    const Piece& piece = s.pieces[static_cast<size_t>(t)];
    PieceData data = piece_data(x + piece.src_offset, y + piece.dst_offset, s.weights,
                                s.has_bias ? &s.bias : nullptr);
    data.tail = tail_of(s.tail);
    execute_piece(state, piece, worker, data);
  };
  const size_t tasks = state.pieces_for(2.0 * static_cast<double>(tiles * kSmallTile * v.k * v.n),
                                        tiles);
  run_in_slices(state.pool.get(), tasks, tiles, [&](int64_t first, int64_t last, int worker) {
    if (tasks < 2 && !s.whole.empty()) {  // one call for all the tiles
      const Piece& piece = s.whole[static_cast<size_t>(tiles - 1)];
      PieceData data = piece_data(x, y, s.weights, s.has_bias ? &s.bias : nullptr);
      data.tail = tail_of(s.tail);
      execute_piece(state, piece, worker, data);
      return;
    }
    for (int64_t t = first; t < last; ++t) tile(t, worker);
  });
  const int64_t done = tiles * kSmallTile;
  run_variable_rows(state, v, rows - done, x + done * v.k, y + done * v.n,
                    residual ? residual + done * v.n : nullptr);
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
    run_rows_read(state, *p.variable, rows > 0 ? rows : p.rows, input, output, residual);
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
      run_rows_read(state, v, p.rows - p.rest_begin, input + p.rest_begin * v.k,
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

// The small tiles of a linear (SmallRowTiles) on the row tile's weight layout (`tile`), or none
// when no brgemm kernel of kSmallTile rows reads that layout.
std::shared_ptr<const SmallRowTiles> small_row_tiles(
    ProviderState& state, const LinearParams& params, const dnnl::matmul::primitive_desc& tile,
    const float* weight, const float* bias, const PostOps& post_ops) {
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  const SplitPostOps split = split_tail(post_ops);
  const memory::desc bias_md = bias ? plain_md({1, n}) : memory::desc();
  const memory::desc user_weight_md = params.weight_is_k_by_n
      ? plain_md({k, n})
      : memory::desc({k, n}, memory::data_type::f32, Dims{1, k});
  try {
    const dnnl::matmul::primitive_desc pd(state.engine, plain_md({kSmallTile, k}),
                                          tile.weights_desc(), bias_md,
                                          plain_md({kSmallTile, n}), make_attr(split.primitive));
    if (std::string(pd.impl_info_str()).rfind("brg", 0) != 0) return nullptr;
    auto small = std::make_shared<SmallRowTiles>();
    const dnnl::matmul primitive = make_matmul(pd);
    for (int64_t q = 1; q <= kSmallTilesMax; ++q) {
      const int64_t rows = q * kSmallTile;
      Piece piece;
      piece.src_md = plain_md({rows, k});
      piece.dst_md = plain_md({rows, n});
      if (q == 1) {
        piece.primitive = primitive;
        piece.scratchpad_md = pd.scratchpad_desc();
      } else {
        std::optional<dnnl::matmul::primitive_desc> whole_pd;
        try {
          whole_pd.emplace(state.engine, piece.src_md, tile.weights_desc(), bias_md,
                           piece.dst_md, make_attr(split.primitive));
        } catch (const dnnl::error&) {
          whole_pd.reset();
        }
        if (!whole_pd || std::string(whole_pd->impl_info_str()).rfind("brg", 0) != 0) {
          small->whole.clear();  // the tiles one by one
          break;
        }
        set_primitive<dnnl::matmul>(piece, *whole_pd);
      }
      state.reserve_piece_scratchpad(piece.scratchpad_md);
      small->whole.push_back(std::move(piece));
    }
    for (int64_t t = 0; t < kSmallTilesMax; ++t) {
      Piece piece;
      piece.primitive = primitive;
      piece.scratchpad_md = pd.scratchpad_desc();
      piece.src_md = plain_md({kSmallTile, k});
      piece.dst_md = plain_md({kSmallTile, n});
      piece.src_offset = static_cast<size_t>(t * kSmallTile * k);
      piece.dst_offset = static_cast<size_t>(t * kSmallTile * n);
      state.reserve_piece_scratchpad(piece.scratchpad_md);
      small->pieces.push_back(std::move(piece));
    }
    small->weights = reorder_constant(state, user_weight_md, weight, tile.weights_desc());
    if (bias) small->bias = reorder_constant(state, bias_md, bias, bias_md);
    small->has_bias = bias != nullptr;
    small->tail = split.tail;
    small->n = n;
    return small;
  } catch (const dnnl::error&) {
    return nullptr;  // no kernel of kSmallTile rows reads the tile's layout
  }
}

// The row counts below a tile the switches let a plan that reads its rows take (its up_to):
// every one with small tiles (`small`: the row tile's layout has them; ET_CPU_SMALL_ROW_TILES
// not 0) or ET_CPU_VARIABLE_ROWS=all, none with ET_CPU_VARIABLE_ROWS=0, else up to
// kRowGemmMaxRows.
int64_t variable_rows_reach(bool small) {
  const SwitchReach reach = switch_reach("ET_CPU_VARIABLE_ROWS");
  if (reach == SwitchReach::kNever) return 0;
  if (reach == SwitchReach::kEverywhere ||
      (small && switch_reach("ET_CPU_SMALL_ROW_TILES") != SwitchReach::kNever)) {
    return kLinearTile - 1;
  }
  return kRowGemmMaxRows;
}

// Of those, the counts it takes for good (its kept_up_to), not only for a first call at a new
// count: small tiles only with ET_CPU_SMALL_ROW_TILES=all.
int64_t variable_rows_kept(bool small) {
  if (switch_reach("ET_CPU_VARIABLE_ROWS") == SwitchReach::kEverywhere) {
    return variable_rows_reach(small);
  }
  if (small && switch_reach("ET_CPU_SMALL_ROW_TILES") == SwitchReach::kEverywhere) {
    return variable_rows_reach(true);
  }
  return std::min(variable_rows_reach(false), kRowGemmMaxRows);
}

// The variable-rows kernels of a linear (LinearVariableRows), on weights packed once in the
// weight cache (and, given the row tile's descriptor `tile`, small tiles on its layout), or none:
// a static graph, ET_CPU_VARIABLE_ROWS=0, or row_gemm not taking the post-ops or this CPU.
std::optional<LinearVariableRows> variable_rows(
    ProviderState& state, const LinearParams& params, const float* weight, const float* bias,
    const PostOps& post_ops, const std::optional<dnnl::matmul::primitive_desc>& tile) {
  if (variable_rows_reach(false) == 0 || !state.size_independent_plans ||
      !row_gemm_supports(kRowGemmMaxRows, post_ops)) {
    return std::nullopt;
  }
  LinearVariableRows v;
  v.k = params.in_features;
  v.n = params.out_features;
  v.up_to = variable_rows_reach(false);
  v.wide = variable_rows_reach(true) > kRowGemmMaxRows &&
           row_gemm_wide_rows(kRowGemmWideRows, v.k, v.n) &&
           row_gemm_supports(kRowGemmWideRows, post_ops);
  if (v.wide) {
    v.up_to = v.kept_up_to = kLinearTile - 1;
  } else {
    if (v.up_to < variable_rows_reach(true) && tile) {  // small tiles for the counts above
      v.small = small_row_tiles(state, params, *tile, weight, bias, post_ops);
      if (v.small) v.up_to = variable_rows_reach(true);
    }
    v.kept_up_to = std::min(v.up_to, variable_rows_kept(v.small != nullptr));
  }
  v.stream_split = row_gemm_stream_split();
  std::shared_ptr<const RowGemm::Packed> packed = cached_row_gemm_weights(
      state.weight_cache.get(), v.k, v.n, weight, params.weight_is_k_by_n, bias);
  for (int64_t r = 1; r <= v.block_rows(); ++r) {
    v.gemms[static_cast<size_t>(r - 1)] = std::make_shared<RowGemm>(r, packed, post_ops);
  }
  return v;
}

}  // namespace

std::optional<LinearPlan> Provider::prepare_linear_rows_read(const LinearParams& params,
                                                            const float* weight,
                                                            const float* bias,
                                                            const PostOps& post_ops,
                                                            const LinearPlan* previous) {
  ProviderState& state = *state_;
  if (!state.size_independent_plans || weight == nullptr ||
      !supports_linear(params, post_ops).ok) {
    return std::nullopt;
  }
  ThreadCountGuard threads(state.omp_threads);
  const int64_t k = params.in_features;
  const int64_t n = params.out_features;
  // The small tiles read the row tile's weight layout: a previous size's descriptor, or one
  // asked here (a descriptor, no kernel).
  std::optional<dnnl::matmul::primitive_desc> tile;
  if (previous != nullptr && previous->impl_->tile) {
    tile = previous->impl_->tile;
  } else {
    try {
      tile = tile_pd(state, k, n, bias ? plain_md({1, n}) : memory::desc(),
                     make_attr(split_tail(post_ops).primitive));
    } catch (const dnnl::error&) {
      tile.reset();
    }
  }
  std::optional<LinearVariableRows> variable =
      variable_rows(state, params, weight, bias, post_ops, tile);
  if (!variable) return std::nullopt;
  auto impl = std::make_shared<LinearPlan::Impl>();
  impl->state = state_;
  impl->rows = std::min(params.rows, variable->up_to);
  impl->has_add = has_add(post_ops);
  impl->weights_bytes = variable->gemms[0]->weights_bytes();
  state.weights_bytes += impl->weights_bytes;
  impl->implementation =
      variable->small  ? "row_gemm:avx512 and brgemm tiles of " + std::to_string(kSmallTile) +
                             " rows (rows read at each run)"
      : variable->wide ? "row_gemm:avx512 in blocks of up to " +
                             std::to_string(kRowGemmWideRows) + " rows (rows read at each run)"
                       : "row_gemm:avx512 (rows read at each run)";
  impl->variable = std::move(variable);
  // The row tile's descriptor (no primitive yet): a plan of 32 rows or more prepared after this
  // one (as its `previous`) asks for none.
  impl->tile = std::move(tile);
  return LinearPlan(std::move(impl));
}

LinearPlan Provider::prepare_linear(const LinearParams& params, const float* weight,
                                    const float* bias, const PostOps& post_ops,
                                    const LinearPlan* previous, const LinearPlan* rows_read,
                                    bool first_at_size) {
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

  // (Asked only where it would serve m: making one costs its small tiles' primitives.)
  if ((m <= (first_at_size ? variable_rows_reach(true) : variable_rows_kept(true)) ||
       (m % kSmallTile == 0 && m <= variable_rows_reach(true)) ||
       (m < kLinearTile && row_gemm_wide_rows(kRowGemmWideRows, k, n))) &&
      state.size_independent_plans) {
    // A graph whose sizes vary: one plan for every count below a tile.
    std::optional<LinearPlan> few =
        prepare_linear_rows_read(params, weight, bias, post_ops, previous);
    if (few && (first_at_size ? few->reads_rows_up_to() >= m : few->keeps_rows(m))) {
      return std::move(*few);
    }
  }
  if ((m <= kRowGemmMaxRows || row_gemm_wide_rows(m, k, n)) && row_gemm_supports(m, post_ops)) {
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
        const LinearPlan* source = rows_read != nullptr ? rows_read : previous;
        rest = source != nullptr && source->impl_->variable &&
                       source->impl_->variable->up_to >= m % kLinearTile
                   ? source->impl_->variable
                   : variable_rows(state, params, weight, bias, post_ops, tile);
        // Small tiles past kept_up_to only stand in (a first call at this size).
        if (rest && !(first_at_size ? m % kLinearTile <= rest->up_to
                                    : rest->keeps(m % kLinearTile))) {
          rest.reset();
        }
        if (rest && rest->small) {  // run on this plan's Provider: its scratchpads
          for (const Piece& piece : rest->small->pieces) {
            state.reserve_piece_scratchpad(piece.scratchpad_md);
          }
          for (const Piece& piece : rest->small->whole) {
            state.reserve_piece_scratchpad(piece.scratchpad_md);
          }
        }
      }
      impl->pieces = split_linear_tiles(state, params, *tile, &impl->tile_primitive,
                                        make_attr(split.primitive), bias != nullptr,
                                        rest.has_value(), &impl->implementation);
      if (!impl->pieces.empty() && rest) {
        impl->stands_in = !rest->keeps(m % kLinearTile);
        impl->variable = std::move(rest);
        impl->rest_begin = m - m % kLinearTile;
        impl->implementation += ", the last " + std::to_string(m % kLinearTile) +
                                (impl->variable->small && m % kLinearTile > kRowGemmMaxRows
                                     ? " rows in brgemm tiles of " + std::to_string(kSmallTile) +
                                           " and on row_gemm:avx512"
                                     : " rows on row_gemm:avx512");
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
