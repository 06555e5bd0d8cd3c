// Smoke driver for payload_fuzzer.cc without libFuzzer: runs LLVMFuzzerTestOneInput on built-in
// seed payloads and on a fixed number of deterministic mutations of them (bit flips, byte
// overwrites with boundary values, truncations, splices), plus any files named on the command
// line. Deterministic (fixed seed), so a failure reproduces; built with sanitizers in Bazel.
//
//   payload_fuzz_smoke [--iterations=N] [FILE...]
//   payload_fuzz_smoke --write-seeds=DIR   (writes the seeds as a libFuzzer corpus; with
//                                           -DPAYLOAD_SEEDS_ONLY only this mode is compiled)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "backends/cpu/runtime/memory_planner.h"
#include "backends/cpu/serialization/schema_generated.h"

#ifdef PAYLOAD_SEEDS_ONLY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
#else
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
#endif

namespace {

namespace fb = et_cpu_plugin::cpu::fb;
using Bytes = std::vector<uint8_t>;

flatbuffers::Offset<fb::Argument> tensor_arg(flatbuffers::FlatBufferBuilder& b, int id) {
  return fb::CreateArgument(b, fb::Arg_TensorArg, fb::CreateTensorArg(b, id).Union());
}

flatbuffers::Offset<fb::Argument> int_arg(flatbuffers::FlatBufferBuilder& b, int64_t v) {
  return fb::CreateArgument(b, fb::Arg_IntArg, fb::CreateIntArg(b, v).Union());
}

flatbuffers::Offset<fb::Argument> ints_arg(flatbuffers::FlatBufferBuilder& b,
                                           std::vector<int64_t> v) {
  return fb::CreateArgument(b, fb::Arg_IntListArg, fb::CreateIntListArgDirect(b, &v).Union());
}

flatbuffers::Offset<fb::Value> value(flatbuffers::FlatBufferBuilder& b, fb::DType dtype,
                                     std::vector<int64_t> shape, fb::ValueKind kind,
                                     const char* key = nullptr) {
  return fb::CreateValueDirect(b, dtype, &shape, kind, key, "v");
}

Bytes finish(flatbuffers::FlatBufferBuilder& b,
             std::vector<flatbuffers::Offset<fb::Value>> values, std::vector<int32_t> inputs,
             std::vector<int32_t> outputs, std::vector<flatbuffers::Offset<fb::Op>> ops,
             uint32_t version = 1, std::vector<flatbuffers::Offset<fb::Symbol>> symbols = {}) {
  b.Finish(fb::CreateGraphDirect(b, version, &values, &inputs, &outputs, &ops,
                                 symbols.empty() ? nullptr : &symbols),
           fb::GraphIdentifier());
  return Bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

flatbuffers::Offset<fb::Op> op(flatbuffers::FlatBufferBuilder& b, const char* kernel,
                               std::vector<flatbuffers::Offset<fb::Argument>> args,
                               uint32_t flags = 0) {
  return fb::CreateOpDirect(b, kernel, kernel, fb::Provider_Reference,
                            static_cast<fb::RouteFlags>(flags), &args, "op");
}

// x + c -> t; neg(t) -> out, with a constant and an intermediate.
Bytes seed_add_chain() {
  flatbuffers::FlatBufferBuilder b;
  auto values = std::vector<flatbuffers::Offset<fb::Value>>{
      value(b, fb::DType_Int64, {2, 3}, fb::ValueKind_Input),
      value(b, fb::DType_Int64, {2, 3}, fb::ValueKind_Constant, "c"),
      value(b, fb::DType_Int64, {2, 3}, fb::ValueKind_Intermediate),
      value(b, fb::DType_Int64, {2, 3}, fb::ValueKind_Output)};
  std::vector<flatbuffers::Offset<fb::Op>> ops;
  ops.push_back(op(b, "aten::add.out", {tensor_arg(b, 0), tensor_arg(b, 1), int_arg(b, 1),
                                        tensor_arg(b, 2)}));
  ops.push_back(op(b, "aten::neg.out", {tensor_arg(b, 2), tensor_arg(b, 3)}));
  return finish(b, std::move(values), {0}, {3}, std::move(ops));
}

// convolution with int lists, no bias, the weight a constant.
Bytes conv_payload(std::vector<int64_t> input, std::vector<int64_t> weight,
                   std::vector<int64_t> output, int64_t groups) {
  flatbuffers::FlatBufferBuilder b;
  auto values = std::vector<flatbuffers::Offset<fb::Value>>{
      value(b, fb::DType_Float32, std::move(input), fb::ValueKind_Input),
      value(b, fb::DType_Float32, std::move(weight), fb::ValueKind_Constant, "w"),
      value(b, fb::DType_Float32, std::move(output), fb::ValueKind_Output)};
  auto none = fb::CreateArgument(b, fb::Arg_NoneArg, fb::CreateNoneArg(b).Union());
  auto transposed = fb::CreateArgument(b, fb::Arg_BoolArg, fb::CreateBoolArg(b, false).Union());
  std::vector<flatbuffers::Offset<fb::Op>> ops;
  ops.push_back(op(b, "aten::convolution.out",
                   {tensor_arg(b, 0), tensor_arg(b, 1), none, ints_arg(b, {1, 1}),
                    ints_arg(b, {0, 0}), ints_arg(b, {1, 1}), transposed, ints_arg(b, {0, 0}),
                    int_arg(b, groups), tensor_arg(b, 2)}));
  return finish(b, std::move(values), {0}, {2}, std::move(ops));
}

Bytes seed_conv() { return conv_payload({1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}, 1); }

// The regression case of the groups overflow: 4 input and weight channels, groups 2^62 + 1
// (weight channels x groups wrapped to 4 and passed the channel check).
Bytes seed_conv_overflowing_groups() {
  return conv_payload({1, 4, 4, 4}, {4, 4, 1, 1}, {1, 4, 4, 4}, (int64_t{1} << 62) + 1);
}

flatbuffers::Offset<fb::SymExpr> sym(flatbuffers::FlatBufferBuilder& b, int64_t offset,
                                     std::vector<int32_t> symbols, std::vector<int64_t> coeffs) {
  return fb::CreateSymExprDirect(b, offset, &symbols, &coeffs);
}

// A value with dimension 0 symbolic (coeff * s, s in [1, kMaxS]) and the others static.
constexpr int64_t kMaxS = 4;
flatbuffers::Offset<fb::Value> dynamic_value(flatbuffers::FlatBufferBuilder& b,
                                             std::vector<int64_t> static_dims, int64_t coeff,
                                             fb::ValueKind kind) {
  std::vector<int64_t> shape = {coeff * kMaxS}, low = {coeff}, high = {coeff * kMaxS};
  std::vector<flatbuffers::Offset<fb::SymExpr>> exprs = {sym(b, 0, {0}, {coeff})};
  for (int64_t d : static_dims) {
    shape.push_back(d);
    low.push_back(d);
    high.push_back(d);
    exprs.push_back(sym(b, d, {}, {}));
  }
  return fb::CreateValueDirect(b, fb::DType_Float32, &shape, kind, nullptr, "v", &low, &high,
                               &exprs);
}

// Version 3 (symbolic dimensions and bounds): x [s, 3] + x -> t; view_copy(t, [3 s]) -> out,
// the view's size a symbolic IntList entry.
Bytes seed_dynamic_chain() {
  flatbuffers::FlatBufferBuilder b;
  auto values = std::vector<flatbuffers::Offset<fb::Value>>{
      dynamic_value(b, {3}, 1, fb::ValueKind_Input),
      dynamic_value(b, {3}, 1, fb::ValueKind_Intermediate),
      dynamic_value(b, {}, 3, fb::ValueKind_Output)};
  std::vector<int64_t> view_size = {3 * kMaxS};
  std::vector<flatbuffers::Offset<fb::SymExpr>> view_exprs = {sym(b, 0, {0}, {3})};
  auto view_arg = fb::CreateArgument(b, fb::Arg_IntListArg,
                                     fb::CreateIntListArgDirect(b, &view_size, &view_exprs).Union());
  std::vector<flatbuffers::Offset<fb::Op>> ops;
  ops.push_back(op(b, "aten::add.out", {tensor_arg(b, 0), tensor_arg(b, 0), int_arg(b, 1),
                                        tensor_arg(b, 1)}));
  ops.push_back(op(b, "aten::view_copy.out", {tensor_arg(b, 1), view_arg, tensor_arg(b, 2)}));
  std::vector<flatbuffers::Offset<fb::Symbol>> symbols = {
      fb::CreateSymbolDirect(b, "s", 1, kMaxS)};
  return finish(b, std::move(values), {0}, {2}, std::move(ops), 3, std::move(symbols));
}

flatbuffers::Offset<fb::Argument> double_arg(flatbuffers::FlatBufferBuilder& b, double v) {
  return fb::CreateArgument(b, fb::Arg_DoubleArg, fb::CreateDoubleArg(b, v).Union());
}

// Version 2 quantization parameters: an int8 1x1 convolution (per-channel weight scales, input
// and output scale / zero point, quant range, fused clamp), checked by quantized_op_check.cc.
Bytes seed_quantized_conv() {
  flatbuffers::FlatBufferBuilder b;
  auto values = std::vector<flatbuffers::Offset<fb::Value>>{
      value(b, fb::DType_Int8, {1, 4, 5, 5}, fb::ValueKind_Input),
      value(b, fb::DType_Int8, {4, 4, 1, 1}, fb::ValueKind_Constant, "w"),
      value(b, fb::DType_Float32, {4}, fb::ValueKind_Constant, "s"),
      value(b, fb::DType_Float32, {4}, fb::ValueKind_Constant, "b"),
      value(b, fb::DType_Int8, {1, 4, 5, 5}, fb::ValueKind_Output)};
  std::vector<flatbuffers::Offset<fb::Op>> ops;
  ops.push_back(op(b, "et_cpu_quant::conv2d.out",
                   {tensor_arg(b, 0), tensor_arg(b, 1), tensor_arg(b, 2), tensor_arg(b, 3),
                    ints_arg(b, {1, 1}), ints_arg(b, {0, 0}), ints_arg(b, {1, 1}), int_arg(b, 1),
                    double_arg(b, 0.05), int_arg(b, 3), double_arg(b, 0.04), int_arg(b, -5),
                    int_arg(b, -128), int_arg(b, 127), double_arg(b, 0.0),
                    double_arg(b, 1e30), tensor_arg(b, 4)}));
  return finish(b, std::move(values), {0}, {4}, std::move(ops), 2);
}

// index.Tensor with a [None, idx] optional list, and a plain list bound as optional.
Bytes seed_index() {
  flatbuffers::FlatBufferBuilder b;
  auto values = std::vector<flatbuffers::Offset<fb::Value>>{
      value(b, fb::DType_Float32, {4, 5}, fb::ValueKind_Input),
      value(b, fb::DType_Int64, {3}, fb::ValueKind_Input),
      value(b, fb::DType_Float32, {4, 3}, fb::ValueKind_Output),
      value(b, fb::DType_Float32, {3, 5}, fb::ValueKind_Output)};
  std::vector<int32_t> optional_ids = {-1, 1};
  std::vector<int32_t> plain_ids = {1};
  auto optional_list = fb::CreateArgument(
      b, fb::Arg_OptionalTensorListArg,
      fb::CreateOptionalTensorListArgDirect(b, &optional_ids).Union());
  auto plain_list = fb::CreateArgument(b, fb::Arg_TensorListArg,
                                       fb::CreateTensorListArgDirect(b, &plain_ids).Union());
  std::vector<flatbuffers::Offset<fb::Op>> ops;
  ops.push_back(op(b, "aten::index.Tensor_out", {tensor_arg(b, 0), optional_list, tensor_arg(b, 2)},
                   fb::RouteFlags_OptionalTensorLists));
  ops.push_back(op(b, "aten::index.Tensor_out", {tensor_arg(b, 0), plain_list, tensor_arg(b, 3)},
                   fb::RouteFlags_OptionalTensorLists));
  return finish(b, std::move(values), {0, 1}, {2, 3}, std::move(ops));
}

// Deterministic xorshift: the smoke run is the same every time.
struct Rng {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

Bytes mutate(const Bytes& seed, const std::vector<Bytes>& seeds, Rng& rng) {
  Bytes data = seed;
  const int rounds = 1 + static_cast<int>(rng.below(4));
  static const uint8_t kBoundary[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x10, 0x40};
  for (int r = 0; r < rounds && !data.empty(); ++r) {
    switch (rng.below(5)) {
      case 0:  // flip one bit
        data[rng.below(data.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:  // boundary byte
        data[rng.below(data.size())] = kBoundary[rng.below(sizeof(kBoundary))];
        break;
      case 2:  // truncate
        data.resize(rng.below(data.size()));
        break;
      case 3: {  // overwrite a 4-byte word (offsets, lengths, ids)
        size_t at = rng.below(data.size());
        uint32_t word = static_cast<uint32_t>(rng.next());
        for (size_t i = 0; i < 4 && at + i < data.size(); ++i) data[at + i] = (word >> (8 * i)) & 0xff;
        break;
      }
      default: {  // splice in a piece of another seed
        const Bytes& other = seeds[rng.below(seeds.size())];
        size_t from = rng.below(other.size());
        size_t len = rng.below(other.size() - from + 1);
        size_t at = rng.below(data.size());
        for (size_t i = 0; i < len && at + i < data.size(); ++i) data[at + i] = other[from + i];
        break;
      }
    }
  }
  return data;
}

#ifndef PAYLOAD_SEEDS_ONLY
// Property check of the arena planner on random lifetimes: buffers alive at the same time never
// share a byte, every offset is aligned, and the arena covers every buffer.
void check_memory_planner(Rng& rng, int rounds) {
  using et_cpu_plugin::cpu::BufferRequest;
  for (int round = 0; round < rounds; ++round) {
    std::vector<BufferRequest> requests(rng.below(40));
    for (auto& request : requests) {
      request.bytes = rng.below(5) == 0 ? 0 : 1 + rng.below(5000);
      request.first_op = rng.below(30);
      request.last_op = request.first_op + rng.below(10);
    }
    auto plan = et_cpu_plugin::cpu::plan_memory(requests, 64);
    for (size_t a = 0; a < requests.size(); ++a) {
      if (plan.offsets[a] % 64 != 0 || plan.offsets[a] + requests[a].bytes > plan.arena_bytes) {
        std::fprintf(stderr, "planner: buffer %zu misplaced\n", a);
        std::abort();
      }
      for (size_t b = a + 1; b < requests.size(); ++b) {
        bool alive_together = requests[a].first_op <= requests[b].last_op &&
                              requests[b].first_op <= requests[a].last_op;
        bool bytes_overlap = plan.offsets[a] < plan.offsets[b] + requests[b].bytes &&
                             plan.offsets[b] < plan.offsets[a] + requests[a].bytes;
        if (alive_together && bytes_overlap) {
          std::fprintf(stderr, "planner: live buffers %zu and %zu overlap\n", a, b);
          std::abort();
        }
      }
    }
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  long iterations = 20000;
  std::vector<Bytes> inputs;
  std::vector<Bytes> seeds = {seed_add_chain(),     seed_conv(),
                              seed_index(),         seed_conv_overflowing_groups(),
                              seed_dynamic_chain(), seed_quantized_conv()};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--write-seeds=", 14) == 0) {
      for (size_t s = 0; s < seeds.size(); ++s) {
        std::ofstream out(std::string(argv[i] + 14) + "/seed" + std::to_string(s), std::ios::binary);
        out.write(reinterpret_cast<const char*>(seeds[s].data()),
                  static_cast<std::streamsize>(seeds[s].size()));
      }
      return 0;
    }
    if (std::strncmp(argv[i], "--iterations=", 13) == 0) {
      iterations = std::strtol(argv[i] + 13, nullptr, 10);
      continue;
    }
    std::ifstream file(argv[i], std::ios::binary);
    inputs.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  for (const Bytes& seed : seeds) LLVMFuzzerTestOneInput(seed.data(), seed.size());
  for (const Bytes& input : inputs) LLVMFuzzerTestOneInput(input.data(), input.size());
  Rng rng;
  for (long i = 0; i < iterations; ++i) {
    Bytes data = mutate(seeds[rng.below(seeds.size())], seeds, rng);
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
#ifndef PAYLOAD_SEEDS_ONLY
  check_memory_planner(rng, 2000);
#endif
  std::printf("payload fuzz smoke: %zu seeds, %zu files, %ld mutations, no crash\n", seeds.size(),
              inputs.size(), iterations);
  return 0;
}
