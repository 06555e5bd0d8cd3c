// Linear and matrix-product binders: aten::linear.out and aten::addmm.out with a constant weight
// (LinearPlan: oneDNN's matmul or our row_gemm for a few rows), aten::mm.out and aten::bmm.out
// (MatmulPlan), each with the offered ReLU / clamp / activation / residual-add steps as
// post-ops. Their operands are read plain.
#include "backends/cpu/runtime/providers/optimized/binders.h"
#include "backends/cpu/runtime/providers/optimized/common/switches.h"
#include "backends/cpu/runtime/providers/optimized/kernels/tile_bmm.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "backends/cpu/runtime/providers/optimized/kernels/row_bmm.h"

namespace et_cpu_plugin {
namespace cpu {
namespace optimized {

namespace {

class LinearKernel final : public OptimizedKernel {
 public:
  LinearKernel(onednn::LinearParams params, const float* weight, const float* bias,
               onednn::PostOps post, const Tensor* input, Tensor* output, const Tensor* residual)
      : params_(params), weight_(weight), bias_(bias), post_(std::move(post)), input_(input),
        output_(output), residual_(residual) {}

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    // The rows from the input's current size (a graph resized in place; the same at bind).
    if (params_.in_features > 0) params_.rows = input_->numel() / params_.in_features;
    // A row count prepared before (a graph resized in place, back at a size it ran at): that
    // plan, which keeps the Provider state it was prepared on (its scratchpads) alive. Linear
    // plans read every activation plain, so the layouts finalize settles do not change them.
    // Only in a graph whose sizes vary: a static one meets one row count and keeps no cache.
    const bool keep = provider.size_independent_plans();
    // A resize's first call at this count, where small tiles may stand in (not at bind nor
    // finalize, at the bounds, nor OptimizedSession::prepare_standing_in: the plan it keeps).
    const bool first_at_size = keep && provider.first_call_stand_ins();
    stand_in_rows_ = 0;
    // Once per session (a graph whose sizes vary), first: the plan that reads its rows at each
    // run, every count below a row tile (1-4 on row_gemm, 5-31 in small tiles of one primitive
    // made here, at the bounds, not at a first call at a new size; LinearPlan::reads_rows_up_to).
    if (keep && !rows_read_tried_) {
      rows_read_tried_ = true;
      std::optional<onednn::LinearPlan> made =
          provider.prepare_linear_rows_read(params_, weight_, bias_, post_, tiled_.get());
      if (made) rows_read_ = std::make_shared<onednn::LinearPlan>(std::move(*made));
    }
    // A count it serves for good: that one, nothing prepared.
    if (keep && rows_read_ && rows_read_->keeps_rows(params_.rows)) {
      plan_ = rows_read_;
      return;
    }
    for (size_t i = 0; keep && i < sizes_.size(); ++i) {
      if (sizes_[i].first != params_.rows) continue;
      std::rotate(sizes_.begin(), sizes_.begin() + static_cast<std::ptrdiff_t>(i),
                  sizes_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      plan_ = sizes_.front().second;
      return;
    }
    // A first call at a count it serves standing in (small tiles, LinearPlan::keeps_rows):
    // that one, nothing prepared; a call again at this count prepares the plan it keeps.
    if (first_at_size && rows_read_ && params_.rows <= rows_read_->reads_rows_up_to()) {
      plan_ = rows_read_;
      stand_in_rows_ = params_.rows;
      return;
    }
    // Else prepared, reusing the row tile of the last plan that had one (LinearPlan's
    // `previous`; before any, the rows-read plan's tile descriptor) and the rows-read plan's
    // kernels for the rows after the tiles.
    const onednn::LinearPlan* previous = tiled_ ? tiled_.get() : rows_read_.get();
    plan_ = std::make_shared<onednn::LinearPlan>(
        provider.prepare_linear(params_, weight_, bias_, post_, keep ? previous : nullptr,
                                keep ? rows_read_.get() : nullptr, first_at_size));
    if (!keep) return;
    if (plan_->reads_rows_up_to() > 0) {
      rows_read_ = plan_;  // not among sizes_: it serves every count up to its limit
      if (!plan_->keeps_rows(params_.rows)) stand_in_rows_ = params_.rows;
      return;
    }
    if (plan_->has_row_tile()) tiled_ = plan_;
    if (plan_->stands_in()) {  // not kept: a call again at this count prepares the one kept
      stand_in_rows_ = params_.rows;
      return;
    }
    sizes_.insert(sizes_.begin(), {params_.rows, plan_});
    if (sizes_.size() > kSizesKept) sizes_.pop_back();
  }
  bool resizable() const override { return true; }
  // LinearPlan and row_gemm read each residual element before writing the output there (the
  // sum post-op adds what dst holds; the row blocks add in registers).
  bool adds_in_place() const override { return residual_ != nullptr; }
  bool stands_in() const override { return stand_in_rows_ > 0; }
  void drop_kept_plans() override {
    stand_in_rows_ = 0;
    sizes_.clear();
    tiled_.reset();
    rows_read_.reset();
    rows_read_tried_ = false;
  }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    return {impl_of(input_), impl_of(residual_)};
  }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override { return plan_ ? plan_->implementation() : ""; }

  Error run(KernelRuntimeContext&) override {
    return guarded("linear", [&] {
      plan_->run(input_->const_data_ptr<float>(), output_->mutable_data_ptr<float>(),
                 residual_ ? residual_->const_data_ptr<float>() : nullptr, params_.rows);
    });
  }

 private:
  onednn::LinearParams params_;
  const float* weight_;
  const float* bias_;
  onednn::PostOps post_;
  const Tensor* input_;
  Tensor* output_;
  const Tensor* residual_;
  std::shared_ptr<onednn::LinearPlan> plan_;
  // The plans of the last row counts prepared, most recent first (a few: the memory of a graph
  // alternating between sizes stays flat).
  static constexpr size_t kSizesKept = 4;
  std::vector<std::pair<int64_t, std::shared_ptr<onednn::LinearPlan>>> sizes_;
  std::shared_ptr<onednn::LinearPlan> tiled_;  // the last plan with a row tile
  // The plan that reads its rows at each run (counts below a row tile), once made.
  std::shared_ptr<onednn::LinearPlan> rows_read_;
  bool rows_read_tried_ = false;
  // The row count plan_ stands in at (small tiles for a first call at it), or 0.
  int64_t stand_in_rows_ = 0;
};

class MatmulKernel final : public OptimizedKernel {
 public:
  // `row`: one-row products run on our row_bmm kernel (kernels/row_bmm.h) instead of oneDNN.
  MatmulKernel(onednn::MatmulParams params, onednn::PostOps post, const Tensor* a,
               const Tensor* b, Tensor* output, const Tensor* residual, bool strided,
               std::optional<onednn::RowBmmParams> row)
      : params_(std::move(params)), post_(std::move(post)), a_(a), b_(b), output_(output),
        residual_(residual), strided_(strided), row_(row) {}

  // Runs on tile_bmm (sizes read at each call) instead: no post-ops, plain operands.
  void use_tile() { tile_ = true; }

  void prepare(onednn::Provider& provider, const InChannelsLast&) override {
    if (row_ || tile_) {
      pool_ = provider.work_pool();
      return;
    }
    if (!strided_) {  // the sizes from the operands' current shapes (the same at bind)
      const ssize_t rank = a_->dim();
      params_.batch = rank == 3 ? a_->size(0) : 1;
      params_.m = a_->size(rank - 2);
      params_.k = a_->size(rank - 1);
      params_.n = b_->size(rank - 1);
    }
    plan_ = std::make_unique<onednn::MatmulPlan>(provider.prepare_matmul(params_, post_));
  }
  // Not with a strided operand (its strides are the bounds') nor on row_bmm (sized at bind).
  bool resizable() const override { return tile_ || (!strided_ && !row_); }
  std::vector<const executorch::aten::TensorImpl*> plain_reads() const override {
    std::vector<const executorch::aten::TensorImpl*> reads = {impl_of(a_), impl_of(b_),
                                                              impl_of(residual_)};
    reads.insert(reads.end(), sources_.begin(), sources_.end());
    return reads;
  }
  // The permutes' inputs it reads in place and the values on the way (StridedOperand): plain.
  void read_in_place(const executorch::aten::TensorImpl* source) { sources_.push_back(source); }
  size_t pieces() const override { return plan_ ? plan_->pieces() : 1; }
  std::string implementation() const override {
    const std::string note = strided_ ? ", operand read in place (permute folded)" : "";
    if (row_) return "row_bmm" + note;
    if (tile_) return "tile_bmm";
    if (!plan_) return "";
    return plan_->implementation() + note;
  }

  Error run(KernelRuntimeContext&) override {
    if (tile_) {
      const onednn::TileBmmShape shape{a_->size(0), a_->size(1), a_->size(2), b_->size(2)};
      return guarded("matmul", [&] {
        onednn::tile_bmm(shape, a_->const_data_ptr<float>(), b_->const_data_ptr<float>(),
                         output_->mutable_data_ptr<float>(), pool_);
      });
    }
    if (row_) {
      return guarded("matmul", [&] {
        onednn::row_bmm(*row_, a_->const_data_ptr<float>(), b_->const_data_ptr<float>(),
                        output_->mutable_data_ptr<float>(), pool_);
      });
    }
    return guarded("matmul", [&] {
      plan_->run(a_->const_data_ptr<float>(), b_->const_data_ptr<float>(),
                 output_->mutable_data_ptr<float>(),
                 residual_ ? residual_->const_data_ptr<float>() : nullptr);
    });
  }

 private:
  onednn::MatmulParams params_;
  onednn::PostOps post_;
  const Tensor* a_;
  const Tensor* b_;
  Tensor* output_;
  const Tensor* residual_;
  bool strided_;
  std::optional<onednn::RowBmmParams> row_;
  bool tile_ = false;
  onednn::WorkPool* pool_ = nullptr;
  std::vector<const executorch::aten::TensorImpl*> sources_;
  std::unique_ptr<onednn::MatmulPlan> plan_;
};

// A bmm of one-row products (decode attention) as row_bmm runs it, when it does: no fused
// post-ops, a's k contiguous, b's k or n contiguous (params' strides, empty = plain).
std::optional<onednn::RowBmmParams> row_bmm_params(const onednn::MatmulParams& params,
                                                   bool batched, size_t fused) {
  if (!batched || params.batch < 2 || params.m != 1 || fused != 0) return std::nullopt;
  onednn::RowBmmParams row;
  row.batch = params.batch;
  row.k = params.k;
  row.n = params.n;
  const std::vector<int64_t>& a = params.a_strides;  // (batch, m, k)
  const std::vector<int64_t>& b = params.b_strides;  // (batch, k, n)
  row.a_batch = a.empty() ? params.k : a[0];
  row.a_k = a.empty() ? 1 : a[2];
  row.b_batch = b.empty() ? params.k * params.n : b[0];
  row.b_k = b.empty() ? params.n : b[1];
  row.b_n = b.empty() ? 1 : b[2];
  if (!onednn::row_bmm_supports(row)) return std::nullopt;
  return row;
}

// Takes the runtime's offer of operands read in place with a permute's strides
// (StridedOperand) when oneDNN runs the strided product on the kernel it would choose for plain
// operands (its reference kernel is far slower than the transposed copy it saves); sets the
// strides in *params and *op.strided_taken. ET_CPU_FOLD_PERMUTE=0 (read by the runtime) makes no
// offers.
bool take_strided_operands(const OpBinding& op, ssize_t rank, OptimizedSession& session,
                           const onednn::PostOps& post, onednn::MatmulParams* params) {
  if (op.strided.size() == 0 || op.strided_taken == nullptr) return false;
  onednn::MatmulParams strided = *params;
  for (const StridedOperand& offer : op.strided) {
    if ((offer.arg != 0 && offer.arg != 1) ||
        offer.strides.size() != static_cast<size_t>(rank)) {
      return false;
    }
    // The batch dim only when the plan has one (a batch of 1 is a plain matrix).
    std::vector<int64_t> strides(offer.strides.begin() + (rank == 3 && params->batch == 1),
                                 offer.strides.end());
    (offer.arg == 0 ? strided.a_strides : strided.b_strides) = std::move(strides);
  }
  if (!onednn::supports_matmul(strided, post).ok) return false;
  try {
    onednn::Provider& provider = session.provider();
    const std::string plain = provider.prepare_matmul(*params, post).implementation();
    const std::string folded = provider.prepare_matmul(strided, post).implementation();
    if (folded.rfind("ref", 0) == 0 && plain.rfind("ref", 0) != 0) return false;
  } catch (const std::exception&) {
    return false;
  }
  *params = std::move(strided);
  *op.strided_taken = true;
  return true;
}

bool bias_is_vector(const Tensor* bias, int64_t n) {
  if (bias == nullptr) return true;
  if (bias->dim() == 1) return bias->size(0) == n;
  return bias->dim() == 2 && bias->size(0) == 1 && bias->size(1) == n;
}

}  // namespace

// aten::linear.out(input, weight, bias?, *, out) and
// aten::addmm.out(self, mat1, mat2, *, beta, alpha, out) with a constant [K, N] mat2.
Error bind_linear(const OpBinding& op, bool is_addmm, OptimizedSession& session,
                  std::unique_ptr<BoundKernel>* out, Decline* decline, size_t* fused) {
  const size_t input_index = is_addmm ? 1 : 0;
  const size_t weight_index = is_addmm ? 2 : 1;
  const size_t bias_index = is_addmm ? 0 : 2;
  const size_t out_index = is_addmm ? 5 : 3;
  const char* what = is_addmm ? "addmm" : "linear";
  if (op.args.size() <= out_index) {
    decline->reason = std::string(what) + ": unexpected argument count";
    return Error::NotSupported;
  }
  const Tensor* input = tensor_arg(op, input_index);
  const Tensor* weight = tensor_arg(op, weight_index);
  const Tensor* bias = tensor_arg(op, bias_index);
  const Tensor* output = tensor_arg(op, out_index);
  if (!is_f32(input) || !is_f32(weight) || !is_f32(output) || (bias && !is_f32(bias))) {
    decline->reason = std::string(what) + ": only float32 tensors";
    return Error::NotSupported;
  }
  if (!is_constant(op, weight_index) || (bias != nullptr && !is_constant(op, bias_index))) {
    decline->reason = std::string(what) + ": weight and bias must be constants";
    return Error::NotSupported;
  }
  if (is_addmm) {
    double beta = 0.0;
    double alpha = 0.0;
    if (!scalar_of(op.args[3], &beta) || !scalar_of(op.args[4], &alpha) || beta != 1.0 ||
        alpha != 1.0) {
      decline->reason = "addmm: beta and alpha must be 1";
      return Error::NotSupported;
    }
  }
  if (weight->dim() != 2 || input->dim() < 1 || (is_addmm && input->dim() != 2)) {
    decline->reason = std::string(what) + ": weight must be 2D" + (is_addmm ? ", mat1 2D" : "");
    return Error::NotSupported;
  }
  onednn::LinearParams params;
  params.weight_is_k_by_n = is_addmm;
  params.in_features = input->size(input->dim() - 1);
  params.out_features = is_addmm ? weight->size(1) : weight->size(0);
  if ((is_addmm ? weight->size(0) : weight->size(1)) != params.in_features ||
      !bias_is_vector(bias, params.out_features)) {
    decline->reason = std::string(what) + ": shapes are not [M, K] x weight + bias[N]";
    return Error::NotSupported;
  }
  params.rows = params.in_features > 0 ? input->numel() / params.in_features : 0;
  if (static_cast<int64_t>(output->numel()) != params.rows * params.out_features) {
    decline->reason = std::string(what) + ": output size differs from M x N";
    return Error::NotSupported;
  }
  onednn::Support base = onednn::supports_linear(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return Error::NotSupported;
  }
  onednn::PostOps post;
  const Tensor* residual = nullptr;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_linear(params, p); }, &post,
      &residual);
  auto kernel = std::make_unique<LinearKernel>(
      params, weight->const_data_ptr<float>(), bias ? bias->const_data_ptr<float>() : nullptr,
      post, input, final_output(op, out_index, *fused), residual);
  session.add_checked(kernel.get());
  *out = std::move(kernel);
  return Error::Ok;
}

// aten::mm.out(self, mat2, *, out) and aten::bmm.out(self, mat2, *, out).
Error bind_matmul(const OpBinding& op, bool batched, OptimizedSession& session,
                  std::unique_ptr<BoundKernel>* out, Decline* decline, size_t* fused) {
  const Tensor* a = tensor_arg(op, 0);
  const Tensor* b = tensor_arg(op, 1);
  const Tensor* output = tensor_arg(op, 2);
  const ssize_t rank = batched ? 3 : 2;
  if (!is_f32(a) || !is_f32(b) || !is_f32(output) || a->dim() != rank || b->dim() != rank) {
    decline->reason = std::string(batched ? "bmm" : "mm") + ": only float32 operands of rank " +
                      std::to_string(rank);
    return Error::NotSupported;
  }
  onednn::MatmulParams params;
  params.batch = batched ? a->size(0) : 1;
  params.m = a->size(rank - 2);
  params.k = a->size(rank - 1);
  params.n = b->size(rank - 1);
  if (b->size(rank - 2) != params.k || (batched && b->size(0) != params.batch)) {
    decline->reason = std::string(batched ? "bmm" : "mm") + ": operand shapes do not match";
    return Error::NotSupported;
  }
  onednn::Support base = onednn::supports_matmul(params, {});
  if (!base.ok) {
    decline->reason = base.reason;
    return Error::NotSupported;
  }
  // A graph whose sizes vary, resized in place (or ET_CPU_TILE_BMM=1): a bmm of plain operands
  // on tile_bmm, whose plan every size shares (no fused steps, no permute read in place).
  if (batched && session.sizes_vary() && onednn::tile_bmm_supported() &&
      (onednn::kernel_opted_in("ET_CPU_TILE_BMM") || resize_in_place_enabled())) {
    *fused = 0;
    auto kernel = std::make_unique<MatmulKernel>(params, onednn::PostOps{}, a, b,
                                                 final_output(op, 2, 0), nullptr, false,
                                                 std::nullopt);
    kernel->use_tile();
    session.add_checked(kernel.get());
    *out = std::move(kernel);
    return Error::Ok;
  }
  onednn::PostOps post;
  const Tensor* residual = nullptr;
  *fused = longest_supported_prefix(
      op, [&](const onednn::PostOps& p) { return onednn::supports_matmul(params, p); }, &post,
      &residual);
  const bool strided = take_strided_operands(op, rank, session, post, &params);
  auto kernel = std::make_unique<MatmulKernel>(params, post, a, b, final_output(op, 2, *fused),
                                               residual, strided,
                                               row_bmm_params(params, batched, *fused));
  for (size_t i = 0; strided && i < op.strided.size(); ++i) {
    for (const EValue* value : op.strided[i].keep_plain) {
      if (value != nullptr && value->isTensor()) {
        kernel->read_in_place(value->toTensor().unsafeGetTensorImpl());
      }
    }
  }
  session.add_checked(kernel.get());
  *out = std::move(kernel);
  return Error::Ok;
}

}  // namespace optimized
}  // namespace cpu
}  // namespace et_cpu_plugin
