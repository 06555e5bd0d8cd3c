#include "tools/runner/tensor_io.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

namespace et_cpu_runner {

using executorch::aten::ScalarType;

namespace {

// The dtypes the runner can sample and checksum, with torch's names.
struct DtypeInfo {
  ScalarType type;
  const char* name;
};

constexpr DtypeInfo kDtypes[] = {
    {ScalarType::Float, "float32"},
    {ScalarType::Double, "float64"},
    {ScalarType::Byte, "uint8"},
    {ScalarType::Char, "int8"},
    {ScalarType::Short, "int16"},
    {ScalarType::Int, "int32"},
    {ScalarType::Long, "int64"},
    {ScalarType::Bool, "bool"},
};

bool known(ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return true;
  }
  return false;
}

template <typename T>
void fill_random(uint8_t* bytes, size_t count, std::mt19937_64& rng) {
  T* out = reinterpret_cast<T*>(bytes);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<T> dist(T(-1), T(1));
    for (size_t i = 0; i < count; ++i) out[i] = dist(rng);
  } else {
    // Integers and bools in [0, 2): valid as indices of any non-empty dimension, as tools/lower.
    std::uniform_int_distribution<int> dist(0, 1);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<T>(dist(rng));
  }
}

template <typename T>
void sum_elements(const executorch::aten::Tensor& tensor, Checksum& out) {
  const T* data = tensor.const_data_ptr<T>();
  for (ssize_t i = 0; i < tensor.numel(); ++i) {
    const double v = static_cast<double>(data[i]);
    out.sum += v;
    out.abs_sum += std::fabs(v);
  }
}

}  // namespace

std::string dtype_name(ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return executorch::runtime::toString(type);
}

std::string describe(ScalarType type, const std::vector<int32_t>& sizes) {
  std::ostringstream text;
  text << dtype_name(type) << "[";
  for (size_t i = 0; i < sizes.size(); ++i) text << (i ? ", " : "") << sizes[i];
  text << "]";
  return text.str();
}

bool make_input(
    const executorch::runtime::MethodMeta& meta,
    size_t index,
    const std::string& file,
    uint64_t seed,
    Input& input,
    std::string& error) {
  const std::string which = "input " + std::to_string(index);
  auto tag = meta.input_tag(index);
  if (!tag.ok() || tag.get() != executorch::runtime::Tag::Tensor) {
    error = which + " is not a tensor; the runner fills tensor inputs only";
    return false;
  }
  auto info = meta.input_tensor_meta(index);
  if (!info.ok()) {
    error = which + ": the program declares no tensor metadata for it";
    return false;
  }
  const ScalarType type = info->scalar_type();
  const auto span = info->sizes();
  std::vector<int32_t> sizes(span.begin(), span.end());
  const size_t nbytes = info->nbytes();
  input.bytes.assign(nbytes, 0);
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (!in) {
      error = which + ": cannot read " + file + ": " + std::strerror(errno);
      return false;
    }
    const auto size = static_cast<size_t>(in.tellg());
    if (size != nbytes) {
      error = which + ": " + file + " has " + std::to_string(size) + " bytes; " +
          describe(type, sizes) + " needs " + std::to_string(nbytes);
      return false;
    }
    in.seekg(0);
    in.read(reinterpret_cast<char*>(input.bytes.data()), static_cast<std::streamsize>(nbytes));
    input.source = file;
  } else {
    if (!known(type)) {
      error = which + ": cannot sample dtype " + dtype_name(type) + "; pass it with --inputs";
      return false;
    }
    // One stream per input: an input's values do not depend on the inputs before it.
    std::mt19937_64 rng(seed * 1000003u + index);
    const size_t count = nbytes / executorch::runtime::elementSize(type);
    uint8_t* bytes = input.bytes.data();
    switch (type) {
      case ScalarType::Float: fill_random<float>(bytes, count, rng); break;
      case ScalarType::Double: fill_random<double>(bytes, count, rng); break;
      case ScalarType::Byte: fill_random<uint8_t>(bytes, count, rng); break;
      case ScalarType::Char: fill_random<int8_t>(bytes, count, rng); break;
      case ScalarType::Short: fill_random<int16_t>(bytes, count, rng); break;
      case ScalarType::Int: fill_random<int32_t>(bytes, count, rng); break;
      case ScalarType::Long: fill_random<int64_t>(bytes, count, rng); break;
      case ScalarType::Bool: fill_random<bool>(bytes, count, rng); break;
      default: break;
    }
    input.source = "random (seed " + std::to_string(seed) + ")";
  }
  input.tensor = executorch::extension::make_tensor_ptr(
      std::vector<executorch::aten::SizesType>(sizes.begin(), sizes.end()),
      input.bytes.data(),
      type);
  return true;
}

bool checksum(const executorch::aten::Tensor& tensor, Checksum& out, std::string& error) {
  out = Checksum{};
  switch (tensor.scalar_type()) {
    case ScalarType::Float: sum_elements<float>(tensor, out); return true;
    case ScalarType::Double: sum_elements<double>(tensor, out); return true;
    case ScalarType::Byte: sum_elements<uint8_t>(tensor, out); return true;
    case ScalarType::Char: sum_elements<int8_t>(tensor, out); return true;
    case ScalarType::Short: sum_elements<int16_t>(tensor, out); return true;
    case ScalarType::Int: sum_elements<int32_t>(tensor, out); return true;
    case ScalarType::Long: sum_elements<int64_t>(tensor, out); return true;
    case ScalarType::Bool: sum_elements<bool>(tensor, out); return true;
    default:
      error = "no checksum for dtype " + dtype_name(tensor.scalar_type());
      return false;
  }
}

}  // namespace et_cpu_runner
