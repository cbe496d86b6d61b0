// Sequences of tensors and optional values (jobflow/sequence.h, ops.h
// namespace seq): the packed form round-trips, each op against values
// worked out here, sizes that change from call to call, the 16-bit float
// storage types as items, and errors that name the op and the culprit.
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include "errors.h"

#include <cstring>
#include <string>
#include <vector>

namespace {

namespace flow = jobflow;
using flow::Blob;
using flow::DType;
using flow::Shape;
using flow::Tensor;

Tensor f32(const Shape& s, float start = 0.f) {
  std::vector<float> v(static_cast<size_t>(flow::numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from<float>(s, v);
}
std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

using jobflow::testing::error_of;

class Sequences : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

TEST_F(Sequences, PackedFormRoundTrips) {
  const std::vector<Tensor> items{f32({2, 3}), f32({}, 7.f), f32({0, 4}), f32({5}, 1.f)};
  const Tensor p = flow::pack_sequence(items, DType::Float32);
  EXPECT_EQ(p.dtype(), DType::UInt8);
  EXPECT_EQ(p.ndim(), 1);
  EXPECT_TRUE(flow::is_packed_sequence(p));
  const flow::UnpackedSequence u = flow::unpack_sequence(p, "p");
  EXPECT_FALSE(u.none);
  EXPECT_EQ(u.elem, DType::Float32);
  ASSERT_EQ(u.items.size(), items.size());
  for (size_t k = 0; k < items.size(); ++k) EXPECT_TRUE(u.items[k].equal(items[k])) << k;
  // An empty sequence keeps its dtype; an optional without a value is not empty.
  const flow::UnpackedSequence e = flow::unpack_sequence(flow::pack_sequence({}, DType::Int64), "e");
  EXPECT_EQ(e.elem, DType::Int64);
  EXPECT_FALSE(e.none);
  EXPECT_TRUE(e.items.empty());
  EXPECT_TRUE(flow::unpack_sequence(flow::pack_none(DType::Int32), "n").none);
}

TEST_F(Sequences, MalformedPackedTensorsAreRefused) {
  EXPECT_NE(error_of([] { flow::unpack_sequence(f32({8}), "arg"); })
                .find("arg: not a packed sequence (a sequence is a uint8 tensor of rank 1, got (8,) float32)"),
            std::string::npos);
  Tensor p = flow::pack_sequence({f32({2, 2})}, DType::Float32);
  EXPECT_FALSE(flow::is_packed_sequence(f32({8})));
  // Cut short: the item's bytes are missing.
  Tensor cut({p.numel() - 8}, DType::UInt8);
  std::memcpy(cut.raw(), p.raw(), cut.nbytes());
  EXPECT_NE(error_of([&] { flow::unpack_sequence(cut, "cut"); }).find("item 0 (2, 2) runs past the end"),
            std::string::npos);
  Tensor bad = p.clone();
  bad.data<uint8_t>()[0] ^= 1;
  EXPECT_NE(error_of([&] { flow::unpack_sequence(bad, "bad"); }).find("no magic word"), std::string::npos);
  EXPECT_NE(error_of([] { flow::pack_sequence({f32({2}), Tensor::scalar<int32_t>(1)}, DType::Float32); })
                .find("item 1 is () int32, the sequence holds float32"),
            std::string::npos);
}

// A job building a sequence from its arguments, inserting, erasing, taking
// an item out and joining the rest: every value checked, at two sizes of
// the same job (each call's sequence sized by its data).
TEST_F(Sequences, OpsInAJobAcrossCallSizes) {
  auto job = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({-1, 2}, DType::Float32, "a"), flow::Numpy::Placeholder({1, 2}, DType::Float32, "b")},
      [](Blob a, Blob b) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy, flow::Numpy> {
        Blob s = flow::seq::construct({a, b}, DType::Float32);
        s = flow::seq::insert(s, flow::mul(b, b), flow::constant(Tensor::scalar<int64_t>(0)));  // [b*b, a, b]
        Blob n = flow::seq::length(s);
        Blob first = flow::seq::at(s, flow::constant(Tensor::scalar<int32_t>(-3)), DType::Float32, 2);
        Blob joined = flow::seq::concat(flow::seq::erase(s, flow::constant(Tensor::scalar<int64_t>(0))), 0, false,
                                        DType::Float32, 2);  // [a; b]
        return {n, first, joined, s};
      });
  for (int64_t rows : {3, 1}) {
    const Tensor a = f32({rows, 2}), b = f32({1, 2}, 10.f);
    auto [n, first, joined, s] = job(a, b);
    EXPECT_EQ(n.dtype(), DType::Int64);
    EXPECT_EQ(n.data<int64_t>()[0], 3);
    EXPECT_EQ(values(first), (std::vector<float>{100.f, 121.f}));
    ASSERT_EQ(joined.shape(), (Shape{rows + 1, 2}));
    std::vector<float> want = values(a);
    want.push_back(10.f);
    want.push_back(11.f);
    EXPECT_EQ(values(joined), want);
    const auto u = flow::unpack_sequence(s, "s");
    ASSERT_EQ(u.items.size(), 3u);
    EXPECT_TRUE(u.items[1].equal(a));
  }
}

TEST_F(Sequences, SplitAndStack) {
  auto job = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({2, 5}, DType::Float32, "x")},
      [](Blob x) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy> {
        Blob by2 = flow::seq::split(x, flow::constant(Tensor::scalar<int64_t>(2)), 1);       // (2,2) (2,2) (2,1)
        Blob sizes = flow::seq::split(x, flow::constant(Tensor::from<int32_t>({2}, {4, 1})), 1);  // (2,4) (2,1)
        Blob rows = flow::seq::split(x, Blob(), 0, false);                                   // (5,) (5,)
        return {by2, sizes, flow::seq::concat(rows, -1, true, DType::Float32, 1)};           // stacked (5, 2)
      });
  auto [by2, sizes, stacked] = job(f32({2, 5}));
  const auto a = flow::unpack_sequence(by2, "by2");
  ASSERT_EQ(a.items.size(), 3u);
  EXPECT_EQ(a.items[2].shape(), (Shape{2, 1}));
  EXPECT_EQ(values(a.items[0]), (std::vector<float>{0, 1, 5, 6}));
  EXPECT_EQ(values(a.items[2]), (std::vector<float>{4, 9}));
  const auto b = flow::unpack_sequence(sizes, "sizes");
  ASSERT_EQ(b.items.size(), 2u);
  EXPECT_EQ(b.items[0].shape(), (Shape{2, 4}));
  ASSERT_EQ(stacked.shape(), (Shape{5, 2}));
  EXPECT_EQ(values(stacked), (std::vector<float>{0, 5, 1, 6, 2, 7, 3, 8, 4, 9}));
}

TEST_F(Sequences, OptionalValues) {
  auto job = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({-1}, DType::UInt8, "opt")},
      [](Blob opt) -> std::tuple<flow::Numpy, flow::Numpy> {
        return {flow::seq::has_element(opt), flow::seq::get_element(opt, true, DType::Int32, 1)};
      });
  const Tensor v = Tensor::from<int32_t>({3}, {4, 5, 6});
  auto [has, got] = job(flow::pack_sequence({v}, DType::Int32));
  EXPECT_TRUE(has.data<bool>()[0]);
  EXPECT_TRUE(got.equal(v));
  EXPECT_NE(error_of([&] { job(flow::pack_none(DType::Int32)); }).find("[optional_get_element] the optional has no value"),
            std::string::npos);
  // A rank other than the job's: named with the item.
  EXPECT_NE(error_of([&] { job(flow::pack_sequence({Tensor::from<int32_t>({1, 1}, {1})}, DType::Int32)); })
                .find("tensor 0 of the sequence is (1, 1) int32; the job was defined for a int32 tensor of rank 1"),
            std::string::npos);
}

// float16 and bfloat16 are storage types no op computes on, but sequences
// only move bytes: they hold them.
TEST_F(Sequences, SixteenBitFloatsAreHeld) {
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({3}, DType::Float16, "h")},
                                   [](Blob h) -> flow::Numpy {
                                     Blob s = flow::seq::construct({h, h}, DType::Float16);
                                     return flow::seq::concat(s, 0, false, DType::Float16, 1);
                                   });
  const Tensor h = f32({3}, 1.5f).astype(DType::Float16);
  const Tensor y = job(h);
  ASSERT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(values(y.astype(DType::Float32)), (std::vector<float>{1.5f, 2.5f, 3.5f, 1.5f, 2.5f, 3.5f}));
}

// A caller's packed tensor may describe zero-size items with any dims:
// joining them makes an empty result at once (no loop over the dims), and
// bool items read back as 0 or 1 whatever byte they held.
TEST_F(Sequences, HostilePackedItemsAreHarmless) {
  auto join = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({-1}, DType::UInt8, "s")},
                                    [](Blob s) -> flow::Numpy { return flow::seq::concat(s, 1, false, DType::Float32, 2); });
  const int64_t huge = int64_t{1} << 50;
  const Tensor empty({huge, 0}, DType::Float32);
  const Tensor y = join(flow::pack_sequence({empty, empty}, DType::Float32));
  EXPECT_EQ(y.shape(), (Shape{huge, 0}));
  Tensor p = flow::pack_sequence({Tensor::from<bool>({2}, {true, false})}, DType::Bool);
  p.data<uint8_t>()[p.numel() - 8] = 7;  // the first item's byte
  const auto u = flow::unpack_sequence(p, "p");
  EXPECT_EQ(static_cast<int>(static_cast<const uint8_t*>(u.items[0].raw())[0]), 1);
  EXPECT_NE(error_of([] { flow::pack_sequence({Tensor(Shape(9, 1), DType::Float32)}, DType::Float32); })
                .find("item 0 has rank 9; sequences hold tensors of rank 8 at most"),
            std::string::npos);
}

TEST_F(Sequences, ErrorsNameTheOpAndTheValue) {
  auto at = flow::global_function(flow::Predict,
                                  {flow::Numpy::Placeholder({-1}, DType::UInt8, "s"),
                                   flow::Numpy::Placeholder({}, DType::Int64, "i")},
                                  [](Blob s, Blob i) -> flow::Numpy { return flow::seq::at(s, i, DType::Float32, 1); });
  const Tensor s = flow::pack_sequence({f32({2}), f32({3})}, DType::Float32);
  EXPECT_NE(error_of([&] { at(s, Tensor::scalar<int64_t>(2)); })
                .find("[sequence_at] position 2 is out of range [-2, 1] for a sequence of 2 tensors"),
            std::string::npos);
  EXPECT_NE(error_of([&] { at(f32({4}).astype(DType::UInt8), Tensor::scalar<int64_t>(0)); })
                .find("[sequence_at] input 0: not a packed sequence"),
            std::string::npos);
  // At definition: a tensor that is no sequence, a dtype the sequence does not hold.
  EXPECT_NE(error_of([] {
              flow::global_function(flow::Predict, {flow::Numpy::Placeholder({4}, DType::Float32, "x")},
                                    [](Blob x) -> flow::Numpy { return flow::seq::length(x); });
            }).find("[sequence_length] input 0 must be a sequence (a packed uint8 tensor of rank 1), got (4,) float32"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              flow::global_function(flow::Predict, {flow::Numpy::Placeholder({4}, DType::Int32, "x")},
                                    [](Blob x) -> flow::Numpy { return flow::seq::construct({x}, DType::Float32); });
            }).find("[sequence_construct] input 0 is (4,) int32, the sequence holds float32"),
            std::string::npos);
  auto erase = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({-1}, DType::UInt8, "s")},
                                     [](Blob s) -> flow::Numpy { return flow::seq::erase(s); });
  EXPECT_NE(error_of([&] { erase(flow::pack_sequence({}, DType::Float32)); }).find("[sequence_erase] the sequence is empty"),
            std::string::npos);
  auto join = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({-1}, DType::UInt8, "s")},
                                    [](Blob s) -> flow::Numpy { return flow::seq::concat(s, 1, false, DType::Float32, 2); });
  EXPECT_NE(error_of([&] { join(flow::pack_sequence({f32({2, 3}), f32({3, 1})}, DType::Float32)); })
                .find("tensor 1 is (3, 1), tensor 0 (2, 3): they must agree on every dim but axis 1"),
            std::string::npos);
}

}  // namespace
