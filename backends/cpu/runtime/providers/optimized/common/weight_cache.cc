// WeightCache (see weight_cache.h): weak references to prepared constants, found by the
// constant's address and the layouts (oneDNN reorders) or k and n (RowGemm packing).
#include "backends/cpu/runtime/providers/optimized/common/weight_cache.h"

#include <atomic>
#include <mutex>

#include "backends/cpu/runtime/providers/optimized/onednn/onednn_internal.h"
#include "backends/cpu/runtime/providers/optimized/kernels/linear_8da_vnni.h"
#include "backends/cpu/runtime/providers/optimized/kernels/row_gemm.h"
#include "backends/cpu/runtime/providers/optimized/kernels/squeeze_excite.h"
#include "backends/cpu/runtime/providers/optimized/kernels/vector_math.h"

namespace et_cpu_plugin {
namespace onednn {

namespace {

// Over every delegate of the process (et_cpu_runtime_weight_cache_*): prepared constants found
// alive in a cache, and made (reordered or packed, with or without a cache) with their bytes.
std::atomic<uint64_t> total_hits{0};
std::atomic<uint64_t> total_made{0};
std::atomic<uint64_t> total_made_bytes{0};

void count_made(size_t bytes) {
  ++total_made;
  total_made_bytes += bytes;
}

}  // namespace

struct WeightCache::Impl {
  // A reordered constant: `data` read as `from`, written as `to`.
  struct Reordered {
    const float* data;
    memory::desc from;
    memory::desc to;
    std::weak_ptr<AlignedBuffer> bytes;
  };
  struct Packed {
    const float* weight;
    const float* bias;
    int64_t k;
    int64_t n;
    bool weight_is_k_by_n;
    std::weak_ptr<const RowGemm::Packed> packed;
  };
  // A linear_8da packing (linear_8da_vnni.h): the constants' addresses and the op's shape.
  struct Packed8da {
    const void* weight;
    const float* scales;
    const int8_t* zero_points;
    const float* bias;
    int64_t k, n, group, bits;
    std::weak_ptr<const Linear8daPacked> packed;
  };
  // A squeeze-excite tail's packing (squeeze_excite.h): its constants' addresses and counts.
  struct PackedSE {
    const float* reduce;
    const float* reduce_bias;
    const float* expand;
    const float* expand_bias;
    int64_t channels, squeezed;
    std::weak_ptr<const SqueezeExciteWeights> packed;
  };
  mutable std::mutex mutex;
  std::vector<PackedSE> packed_se;
  std::vector<Reordered> reordered;
  std::vector<Packed> packed;
  std::vector<Packed8da> packed_8da;
  uint64_t hits = 0;
  uint64_t misses = 0;
  bool keep = false;                              // keep_everything()
  std::vector<std::shared_ptr<const void>> kept;  // what it owns then

  // Drops the entries no plan holds any more (called on a miss: they only add up then).
  void prune() {
    reordered.erase(std::remove_if(reordered.begin(), reordered.end(),
                                   [](const Reordered& e) { return e.bytes.expired(); }),
                    reordered.end());
    packed.erase(std::remove_if(packed.begin(), packed.end(),
                                [](const Packed& e) { return e.packed.expired(); }),
                 packed.end());
    packed_8da.erase(std::remove_if(packed_8da.begin(), packed_8da.end(),
                                    [](const Packed8da& e) { return e.packed.expired(); }),
                     packed_8da.end());
    packed_se.erase(std::remove_if(packed_se.begin(), packed_se.end(),
                                   [](const PackedSE& e) { return e.packed.expired(); }),
                    packed_se.end());
  }
};

WeightCache::WeightCache() : impl_(std::make_unique<Impl>()) {}
WeightCache::~WeightCache() = default;

uint64_t WeightCache::hits() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->hits;
}
uint64_t WeightCache::misses() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->misses;
}
size_t WeightCache::live_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  size_t bytes = 0;
  for (const Impl::Reordered& e : impl_->reordered) {
    if (!e.bytes.expired()) bytes += e.to.get_size();
  }
  for (const Impl::Packed& e : impl_->packed) {
    if (auto packed = e.packed.lock()) bytes += packed->bytes();
  }
  for (const Impl::Packed8da& e : impl_->packed_8da) {
    if (auto packed = e.packed.lock()) bytes += packed->bytes();
  }
  for (const Impl::PackedSE& e : impl_->packed_se) {
    if (auto packed = e.packed.lock()) bytes += packed->bytes();
  }
  return bytes;
}

void WeightCache::keep_everything() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->keep) return;
  impl_->keep = true;
  for (const Impl::Reordered& e : impl_->reordered) {
    if (auto bytes = e.bytes.lock()) impl_->kept.push_back(std::move(bytes));
  }
  for (const Impl::Packed& e : impl_->packed) {
    if (auto packed = e.packed.lock()) impl_->kept.push_back(std::move(packed));
  }
  for (const Impl::Packed8da& e : impl_->packed_8da) {
    if (auto packed = e.packed.lock()) impl_->kept.push_back(std::move(packed));
  }
  for (const Impl::PackedSE& e : impl_->packed_se) {
    if (auto packed = e.packed.lock()) impl_->kept.push_back(std::move(packed));
  }
}

bool weight_cache_enabled() { return kernel_switched_on("ET_CPU_WEIGHT_CACHE"); }

OwnedTensor cached_constant(WeightCache* cache, const memory::desc& from, const float* data,
                            const memory::desc& to, const std::function<OwnedTensor()>& make) {
  if (cache == nullptr) {
    count_made(to.get_size());
    return make();
  }
  WeightCache::Impl& impl = cache->impl();
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    for (const WeightCache::Impl::Reordered& e : impl.reordered) {
      if (e.data != data || e.from != from || e.to != to) continue;
      if (auto bytes = e.bytes.lock()) {
        ++impl.hits;
        ++total_hits;
        return OwnedTensor{to, std::move(bytes)};
      }
    }
  }
  OwnedTensor made = make();  // outside the lock: a reorder takes a while
  count_made(to.get_size());
  std::lock_guard<std::mutex> lock(impl.mutex);
  ++impl.misses;
  impl.prune();
  impl.reordered.push_back({data, from, to, made.bytes});
  if (impl.keep) impl.kept.push_back(made.bytes);
  return made;
}

std::shared_ptr<const RowGemm::Packed> cached_row_gemm_weights(WeightCache* cache, int64_t k,
                                                               int64_t n, const float* weight,
                                                               bool weight_is_k_by_n,
                                                               const float* bias) {
  if (cache == nullptr) {
    auto packed = RowGemm::pack(k, n, weight, weight_is_k_by_n, bias);
    count_made(packed->bytes());
    return packed;
  }
  WeightCache::Impl& impl = cache->impl();
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    for (const WeightCache::Impl::Packed& e : impl.packed) {
      if (e.weight != weight || e.bias != bias || e.k != k || e.n != n ||
          e.weight_is_k_by_n != weight_is_k_by_n) {
        continue;
      }
      if (auto packed = e.packed.lock()) {
        ++impl.hits;
        ++total_hits;
        return packed;
      }
    }
  }
  std::shared_ptr<const RowGemm::Packed> packed =
      RowGemm::pack(k, n, weight, weight_is_k_by_n, bias);
  count_made(packed->bytes());
  std::lock_guard<std::mutex> lock(impl.mutex);
  ++impl.misses;
  impl.prune();
  impl.packed.push_back({weight, bias, k, n, weight_is_k_by_n, packed});
  if (impl.keep) impl.kept.push_back(packed);
  return packed;
}

std::shared_ptr<const Linear8daPacked> cached_linear_8da_weights(WeightCache* cache,
                                                                 const Linear8daParams& params,
                                                                 const void* weight,
                                                                 const float* scales,
                                                                 const int8_t* zero_points,
                                                                 const float* bias) {
  if (cache == nullptr) {
    auto packed = pack_linear_8da(params, weight, scales, zero_points, bias);
    count_made(packed->bytes());
    return packed;
  }
  WeightCache::Impl& impl = cache->impl();
  auto same = [&](const WeightCache::Impl::Packed8da& e) {
    return e.weight == weight && e.scales == scales && e.zero_points == zero_points &&
           e.bias == bias && e.k == params.k && e.n == params.n && e.group == params.group &&
           e.bits == params.bits;
  };
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    for (const WeightCache::Impl::Packed8da& e : impl.packed_8da) {
      if (!same(e)) continue;
      if (auto packed = e.packed.lock()) {
        ++impl.hits;
        ++total_hits;
        return packed;
      }
    }
  }
  std::shared_ptr<const Linear8daPacked> packed =
      pack_linear_8da(params, weight, scales, zero_points, bias);
  count_made(packed->bytes());
  std::lock_guard<std::mutex> lock(impl.mutex);
  ++impl.misses;
  impl.prune();
  impl.packed_8da.push_back({weight, scales, zero_points, bias, params.k, params.n, params.group,
                             params.bits, packed});
  if (impl.keep) impl.kept.push_back(packed);
  return packed;
}

std::shared_ptr<const SqueezeExciteWeights> cached_squeeze_excite_weights(
    WeightCache* cache, int64_t channels, int64_t squeezed, const float* reduce,
    const float* reduce_bias, const float* expand, const float* expand_bias) {
  auto pack = [&] {
    auto packed =
        pack_squeeze_excite(channels, squeezed, reduce, reduce_bias, expand, expand_bias);
    count_made(packed->bytes());
    return packed;
  };
  if (cache == nullptr) return pack();
  WeightCache::Impl& impl = cache->impl();
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    for (const WeightCache::Impl::PackedSE& e : impl.packed_se) {
      if (e.reduce != reduce || e.reduce_bias != reduce_bias || e.expand != expand ||
          e.expand_bias != expand_bias || e.channels != channels || e.squeezed != squeezed) {
        continue;
      }
      if (auto packed = e.packed.lock()) {
        ++impl.hits;
        ++total_hits;
        return packed;
      }
    }
  }
  std::shared_ptr<const SqueezeExciteWeights> packed = pack();
  std::lock_guard<std::mutex> lock(impl.mutex);
  ++impl.misses;
  impl.prune();
  impl.packed_se.push_back({reduce, reduce_bias, expand, expand_bias, channels, squeezed, packed});
  if (impl.keep) impl.kept.push_back(packed);
  return packed;
}

}  // namespace onednn
}  // namespace et_cpu_plugin

// Prepared constants over the process (the loader's weight_cache_stats): found alive in a weight
// cache (a shape plan reusing its base's), and made, with their bytes. Exported by the Optimized
// provider, so absent from a runtime built without it.
extern "C" {

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_weight_cache_hits() {
  return et_cpu_plugin::onednn::total_hits.load();
}

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_weights_made() {
  return et_cpu_plugin::onednn::total_made.load();
}

__attribute__((visibility("default"))) uint64_t et_cpu_runtime_weights_made_bytes() {
  return et_cpu_plugin::onednn::total_made_bytes.load();
}

}  // extern "C"
