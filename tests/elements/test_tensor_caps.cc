// tensor_caps.h (NNStreamer caps <-> TensorSpecs, buffers <-> Tensors) and
// jobflow_meta.h (JobflowTensorMeta).
#include <gtest/gtest.h>

#include <gst/gst.h>

#include <string>
#include <vector>

#include "jobflow_meta.h"
#include "jobsink.h"
#include "tensor_caps.h"

namespace {

using jobflow::DType;
using jobflow::Shape;
using jobflow::Tensor;
using jobflow::TensorSpec;
namespace jg = jobflow::gst;

class GstEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { gst_init(nullptr, nullptr); }
};
const auto* const env = ::testing::AddGlobalTestEnvironment(new GstEnvironment);

GstCaps* parse(const char* s) {
  GstCaps* c = gst_caps_from_string(s);
  EXPECT_NE(c, nullptr) << s;
  return c;
}

TEST(TensorCaps, DtypeNames) {
  for (int i = 0; i < jobflow::kDTypeCount; ++i) {
    const auto t = static_cast<DType>(i);
    DType back;
    ASSERT_TRUE(jg::dtype_from_nns(jg::dtype_to_nns(t), &back)) << jg::dtype_to_nns(t);
    EXPECT_EQ(back, t);
  }
  DType t;
  ASSERT_TRUE(jg::dtype_from_nns("float16", &t));  // NNStreamer's name
  EXPECT_EQ(t, DType::Float16);
  EXPECT_FALSE(jg::dtype_from_nns("float8", &t));
  EXPECT_FALSE(jg::dtype_from_nns("", &t));
}

TEST(TensorCaps, DimsInnermostFirst) {
  EXPECT_EQ(jg::dims_to_string({100, 1, 28, 28}), "28:28:1:100");
  EXPECT_EQ(jg::dims_to_string({10}), "10");
  EXPECT_EQ(jg::dims_to_string({}), "1");
  Shape s;
  ASSERT_TRUE(jg::dims_from_string("28:28:1:100", 0, &s));
  EXPECT_EQ(s, (Shape{100, 1, 28, 28}));
  ASSERT_TRUE(jg::dims_from_string(" 3:4 ", 0, &s));
  EXPECT_EQ(s, (Shape{4, 3}));
  for (const char* bad : {"", ":", "3::4", "3:x", "-1", "3:0:2", "99999999999"})
    EXPECT_FALSE(jg::dims_from_string(bad, 0, &s)) << bad;
}

TEST(TensorCaps, RankFourPadding) {
  Shape s;
  // NNStreamer pads to rank 4 with outer 1s: keep the expected rank.
  ASSERT_TRUE(jg::dims_from_string("10:1:1:1", 1, &s));
  EXPECT_EQ(s, (Shape{10}));
  ASSERT_TRUE(jg::dims_from_string("28:28:1:1", 3, &s));
  EXPECT_EQ(s, (Shape{1, 28, 28}));
  // Without an expected rank every dim is kept.
  ASSERT_TRUE(jg::dims_from_string("10:1:1:1", 0, &s));
  EXPECT_EQ(s, (Shape{1, 1, 1, 10}));
  // Padding must be 1s.
  EXPECT_FALSE(jg::dims_from_string("10:2:1:1", 1, &s));
  // Fewer dims than expected: missing outer dims are 1.
  ASSERT_TRUE(jg::dims_from_string("10", 2, &s));
  EXPECT_EQ(s, (Shape{1, 10}));
  // Newer NNStreamer writes unused dims as 0.
  ASSERT_TRUE(jg::dims_from_string("10:4:0:0", 0, &s));
  EXPECT_EQ(s, (Shape{4, 10}));
}

TEST(TensorCaps, RoundTrip) {
  std::vector<TensorSpec> specs = {{{100, 1, 28, 28}, DType::Float32}, {{100}, DType::Int32}, {{2, 3}, DType::UInt8}};
  GstCaps* caps = jg::caps_from_specs(specs, 30, 1);
  ASSERT_TRUE(gst_caps_is_fixed(caps));
  const GstStructure* st = gst_caps_get_structure(caps, 0);
  EXPECT_STREQ(gst_structure_get_name(st), "other/tensors");
  EXPECT_STREQ(gst_structure_get_string(st, "format"), "static");
  EXPECT_STREQ(gst_structure_get_string(st, "dimensions"), "28:28:1:100,100,3:2");
  EXPECT_STREQ(gst_structure_get_string(st, "types"), "float32,int32,uint8");
  int n = 0, fn = 0, fd = 0;
  EXPECT_TRUE(gst_structure_get_int(st, "num_tensors", &n));
  EXPECT_EQ(n, 3);
  EXPECT_TRUE(gst_structure_get_fraction(st, "framerate", &fn, &fd));
  EXPECT_EQ(fn, 30);
  EXPECT_EQ(fd, 1);
  std::vector<TensorSpec> back;
  std::string err;
  ASSERT_TRUE(jg::specs_from_caps(caps, &back, &err)) << err;
  EXPECT_EQ(back, specs);
  // Through the caps' string form too.
  gchar* text = gst_caps_to_string(caps);
  GstCaps* again = parse(text);
  g_free(text);
  ASSERT_TRUE(jg::specs_from_caps(again, &back, &err)) << err;
  EXPECT_EQ(back, specs);
  gst_caps_unref(again);
  gst_caps_unref(caps);
  // fps_d == 0: no framerate field.
  caps = jg::caps_from_specs({{{4}, DType::Float32}}, 0, 0);
  EXPECT_FALSE(gst_structure_has_field(gst_caps_get_structure(caps, 0), "framerate"));
  gst_caps_unref(caps);
}

TEST(TensorCaps, NNStreamerSeparatorsAndPadding) {
  // As NNStreamer writes them: '.' between tensors, rank-4 padding.
  GstCaps* caps = parse(
      "other/tensors,format=static,num_tensors=2,dimensions=(string)\"28:28:1:100.100:1:1:1\","
      "types=(string)\"float32.int32\",framerate=(fraction)0/1");
  std::vector<TensorSpec> specs;
  std::string err;
  ASSERT_TRUE(jg::specs_from_caps(caps, &specs, &err, {4, 1})) << err;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].shape, (Shape{100, 1, 28, 28}));
  EXPECT_EQ(specs[0].dtype, DType::Float32);
  EXPECT_EQ(specs[1].shape, (Shape{100}));
  EXPECT_EQ(specs[1].dtype, DType::Int32);
  gst_caps_unref(caps);
  // The single-tensor media type.
  caps = parse("other/tensor,dimension=(string)10:1:1:1,type=(string)uint8,framerate=(fraction)0/1");
  ASSERT_TRUE(jg::specs_from_caps(caps, &specs, &err, {1})) << err;
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].shape, (Shape{10}));
  EXPECT_EQ(specs[0].dtype, DType::UInt8);
  gst_caps_unref(caps);
}

TEST(TensorCaps, ErrorsNameTheField) {
  struct Case {
    const char* caps;
    const char* expect;
  } cases[] = {
      {"video/x-raw,format=GRAY8,width=28,height=28", "video/x-raw"},
      {"other/tensors,format=flexible,num_tensors=1,dimensions=4,types=float32", "format"},
      {"other/tensors,format=static,num_tensors=2,dimensions=4,types=float32", "dimensions"},
      {"other/tensors,format=static,num_tensors=1,dimensions=4,types=complex64", "complex64"},
      {"other/tensors,format=static,num_tensors=1,dimensions=4:x,types=float32", "4:x"},
      {"other/tensors,format=static,num_tensors=1,types=float32", "dimensions"},
      {"other/tensors,format=static,num_tensors=1,dimensions=4,types={float32,int32}", "fixed"},
      // 2^31 - 1 per dim fits, their product does not (issue 14): named before any size is computed.
      {"other/tensors,format=static,num_tensors=1,dimensions=2147483647:2147483647:2147483647,types=float32",
       "tensor 0 has dims '2147483647:2147483647:2147483647' float32: the element count overflows 64 bits"},
      {"other/tensors,format=static,num_tensors=2,dimensions=\"4,1073741824:2147483647:4\","
       "types=\"float32,float64\"",
       "tensor 1 has dims '1073741824:2147483647:4' float64: the byte size"},
  };
  for (const Case& c : cases) {
    GstCaps* caps = parse(c.caps);
    std::vector<TensorSpec> specs;
    std::string err;
    EXPECT_FALSE(jg::specs_from_caps(caps, &specs, &err)) << c.caps;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.caps << " -> " << err;
    gst_caps_unref(caps);
  }
}

TEST(TensorCaps, BufferRoundTripIsZeroCopy) {
  Tensor a = Tensor::from<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from<int32_t>({3}, {7, 8, 9});
  GstBuffer* buf = jg::buffer_from_tensors({a, b});
  ASSERT_EQ(gst_buffer_n_memory(buf), 2u);
  EXPECT_EQ(gst_buffer_get_size(buf), 6 * 4 + 3 * 4u);
  std::vector<Tensor> out;
  std::string err;
  ASSERT_TRUE(jg::tensors_from_buffer(buf, {{{2, 3}, DType::Float32}, {{3}, DType::Int32}}, &out, &err)) << err;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].raw(), a.raw());  // the same bytes, not a copy
  EXPECT_EQ(out[1].raw(), b.raw());
  EXPECT_TRUE(out[0].equal(a));
  EXPECT_TRUE(out[1].equal(b));
  // The views outlive the buffer and the original tensors.
  gst_buffer_unref(buf);
  a = Tensor();
  b = Tensor();
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out[1].to_vector<int32_t>(), (std::vector<int32_t>{7, 8, 9}));
}

TEST(TensorCaps, BufferMemoriesAreReadOnly) {
  Tensor a = Tensor::from<float>({2}, {1, 2});
  GstBuffer* buf = jg::buffer_from_tensors({a});
  // A writer gets its own copy; the tensor is untouched.
  GstMapInfo map;
  ASSERT_TRUE(gst_buffer_map(buf, &map, GST_MAP_WRITE));
  EXPECT_NE(static_cast<void*>(map.data), a.raw());
  reinterpret_cast<float*>(map.data)[0] = 42;
  gst_buffer_unmap(buf, &map);
  EXPECT_EQ(a.data<float>()[0], 1.0f);
  gst_buffer_unref(buf);
}

TEST(TensorCaps, PackedBufferIsSliced) {
  // Two tensors in one memory (not Jobflow's layout, but valid bytes).
  std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6};
  GstBuffer* buf = gst_buffer_new_memdup(bytes.data(), bytes.size());
  std::vector<Tensor> out;
  std::string err;
  ASSERT_TRUE(jg::tensors_from_buffer(buf, {{{2, 2}, DType::UInt8}, {{2}, DType::UInt8}}, &out, &err)) << err;
  EXPECT_EQ(out[0].to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(out[1].to_vector<uint8_t>(), (std::vector<uint8_t>{5, 6}));
  gst_buffer_unref(buf);
}

TEST(TensorCaps, SizeMismatchIsAnError) {
  Tensor a = Tensor::from<float>({3}, {1, 2, 3});
  GstBuffer* buf = jg::buffer_from_tensors({a});
  std::vector<Tensor> out;
  std::string err;
  EXPECT_FALSE(jg::tensors_from_buffer(buf, {{{4}, DType::Float32}}, &out, &err));
  EXPECT_NE(err.find("expected 16 bytes, got 12"), std::string::npos) << err;
  EXPECT_FALSE(jg::tensors_from_buffer(buf, {{{2}, DType::Float32}, {{2}, DType::Float32}}, &out, &err));
  EXPECT_NE(err.find("bytes"), std::string::npos) << err;
  gst_buffer_unref(buf);
}

TEST(TensorCaps, SampleToTensors) {
  Tensor a = Tensor::from<float>({1, 2}, {0.5f, -1.5f});
  GstBuffer* buf = jg::buffer_from_tensors({a});
  GstCaps* caps = jg::caps_from_specs({{{1, 2}, DType::Float32}});
  GstSample* sample = gst_sample_new(buf, caps, nullptr, nullptr);
  gst_buffer_unref(buf);
  gst_caps_unref(caps);
  std::vector<Tensor> out;
  std::string err;
  ASSERT_TRUE(jobflow_sample_to_tensors(sample, &out, &err)) << err;
  gst_sample_unref(sample);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].raw(), a.raw());
  EXPECT_EQ(out[0].shape(), (Shape{1, 2}));
  EXPECT_FALSE(jobflow_sample_to_tensors(nullptr, &out, &err));
  GstCaps* video = gst_caps_from_string("video/x-raw,format=GRAY8,width=2,height=1,framerate=0/1");
  GstBuffer* raw = gst_buffer_new_allocate(nullptr, 2, nullptr);
  sample = gst_sample_new(raw, video, nullptr, nullptr);
  EXPECT_FALSE(jobflow_sample_to_tensors(sample, &out, &err));
  EXPECT_NE(err.find("caps"), std::string::npos) << err;
  gst_sample_unref(sample);
  gst_buffer_unref(raw);
  gst_caps_unref(video);
}

TEST(TensorMeta, DescribesTheTensorsAndSurvivesCopies) {
  std::vector<TensorSpec> specs = {{{100, 1, 28, 28}, DType::Float32}, {{100}, DType::Int32}};
  GstBuffer* buf = gst_buffer_new();
  JobflowTensorMeta* meta = jg::add_tensor_meta(buf, specs, {"images", "labels"});
  ASSERT_NE(meta, nullptr);
  EXPECT_EQ(meta->num_tensors, 2u);
  EXPECT_EQ(meta->tensors[0].data_type, JOBFLOW_TENSOR_DATA_TYPE_FLOAT32);
  EXPECT_EQ(meta->tensors[0].num_dims, 4u);
  EXPECT_EQ(meta->tensors[0].dims[0], 100u);
  EXPECT_EQ(meta->tensors[0].dims[3], 28u);
  EXPECT_EQ(meta->tensors[1].data_type, JOBFLOW_TENSOR_DATA_TYPE_INT32);
  // The enum values are GstTensorDataType's (1.26).
  EXPECT_EQ(static_cast<int>(JOBFLOW_TENSOR_DATA_TYPE_FLOAT32), 11);
  EXPECT_EQ(static_cast<int>(JOBFLOW_TENSOR_DATA_TYPE_UINT8), 6);
  const JobflowTensorInfo* labels = jobflow_tensor_meta_get_by_id(meta, g_quark_from_string("labels"));
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ(labels, &meta->tensors[1]);
  EXPECT_STREQ(g_type_name(jobflow_tensor_meta_api_get_type()), "JobflowTensorMetaAPI");
  EXPECT_STREQ(g_type_name(jobflow_tensor_meta_get_info()->type), "JobflowTensorMeta");

  GstBuffer* copy = gst_buffer_copy(buf);
  JobflowTensorMeta* m2 = jobflow_buffer_get_tensor_meta(copy);
  ASSERT_NE(m2, nullptr);
  ASSERT_NE(m2->tensors, meta->tensors);  // a deep copy
  std::vector<TensorSpec> back;
  ASSERT_TRUE(jg::specs_from_meta(m2, &back));
  EXPECT_EQ(back, specs);
  gst_buffer_unref(buf);
  EXPECT_EQ(m2->tensors[0].dims[1], 1u);
  gst_buffer_unref(copy);
}

}  // namespace
