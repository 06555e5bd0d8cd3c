// Prepared constants shared by the Providers of one delegate instance: a graph with symbolic
// dimensions compiles one set of plans per concrete size (and each compile prepares its plans
// twice: at bind with plain activations, at finalize with the chosen layouts), while a reordered
// weight or bias depends only on the constant and the layout its primitive reads it in, and a
// RowGemm's packing only on the constant and its k and n. Plans prepared with a cache look there
// first, keyed by the constant's address and that layout, so a new size only creates primitives.
//
// The cache never owns an entry: it holds weak references to what live plans hold, so memory is
// what the plans of the sizes compiled now need (each prepared constant once), never more; a
// layout oneDNN picks for one size only is made again when no live plan holds it.
//
// Plain types only (see onednn_provider.h); prepare-time only, guarded by a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace et_cpu_plugin {
namespace onednn {

class WeightCache {
 public:
  WeightCache();
  ~WeightCache();
  WeightCache(const WeightCache&) = delete;
  WeightCache& operator=(const WeightCache&) = delete;

  // Prepared constants found in the cache / made because none was alive, since creation.
  uint64_t hits() const;
  uint64_t misses() const;
  // Bytes of the prepared constants some live plan holds (each counted once).
  size_t live_bytes() const;
  // From now on the cache owns every prepared constant it holds or makes: a graph resized in
  // place prepares its plans again at each size change, and a layout one size needs (a whole
  // primitive's, the row tiles', a RowGemm packing) stays for the next time instead of being
  // made again. Bounded by the layouts its plans use (a few per constant).
  void keep_everything();

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// ET_CPU_WEIGHT_CACHE=0: every plan prepares its own constants (the behaviour before the cache),
// for measuring what it saves. Read when a delegate instance opens its provider session.
bool weight_cache_enabled();

}  // namespace onednn
}  // namespace et_cpu_plugin
