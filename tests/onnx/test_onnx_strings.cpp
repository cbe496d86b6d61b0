// ONNX string tensors (issue 9): models built here with StringNormalizer,
// Cast and CastLike to and from strings, TfIdfVectorizer over string tokens
// and string constants; a string input and output in their packed form
// (jobflow/strings.h); load errors that name the node, the input and what
// is missing; a job with string ops refuses to be saved; .npy files of
// strings. ONNX's own cases (node/test_strnormalizer_*, test_cast_*STRING*,
// simple/test_strnorm_*) run in the conformance suite.
#include "errors.h"
#include "onnx_test_util.h"

#include "jobflow/data.h"
#include "jobflow/strings.h"

namespace {

using namespace onnx_test;
namespace fl = jobflow;
using Strings = std::vector<std::string>;

// A graph input of type tensor(string) with `rank` symbolic dims.
void string_input(Model& md, const std::string& name, int rank) {
  auto* vi = md.m.mutable_graph()->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::STRING);
  auto* sh = tt->mutable_shape();
  static const char* const names[] = {"d0", "d1", "d2", "d3"};
  for (int d = 0; d < rank; ++d) sh->add_dim()->set_dim_param(names[d]);
}
void set_string(::onnx::NodeProto* n, const char* k, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}
void set_strings(::onnx::NodeProto* n, const char* k, const Strings& v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::STRINGS);
  for (auto& s : v) a->add_strings(s);
}
std::shared_ptr<fl::CompiledJob> load(Model& md) {
  std::string bytes;
  EXPECT_TRUE(md.m.SerializeToString(&bytes));
  return fl::onnx::load_bytes(bytes, {}, "model");
}
fl::UnpackedStrings strings_of(const Tensor& t) { return fl::unpack_strings(t, "result"); }

TEST(Strings, PackedFormRoundTripsAndRefusesOtherBytes) {
  const Strings items = {"", "monday", "ÉCLAIR", std::string("a\0b", 3), "x"};
  const Tensor p = fl::pack_strings({items.begin(), items.begin() + 4}, {2, 2});
  EXPECT_TRUE(fl::is_packed_strings(p));
  EXPECT_EQ(p.dtype(), fl::DType::UInt8);
  EXPECT_EQ(p.ndim(), 1);
  const auto u = fl::unpack_strings(p, "p");
  EXPECT_EQ(u.shape, (Shape{2, 2}));
  EXPECT_EQ(u.items, (Strings{items.begin(), items.begin() + 4}));
  // A scalar string and an empty tensor.
  EXPECT_EQ(fl::unpack_strings(fl::pack_strings({"x"}, {}), "s").items, (Strings{"x"}));
  EXPECT_EQ(fl::unpack_strings(fl::pack_strings({}, {0, 3}), "e").shape, (Shape{0, 3}));
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::pack_strings(items, {2, 2}); }), "5 strings for shape (2, 2)");
  // Not packed strings: a plain tensor, a sequence, a cut-off buffer.
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::unpack_strings(Tensor::from<float>({2}, {1, 2}), "x"); }),
                  "x: not a packed string tensor (a string tensor is a uint8 tensor of rank 1, got (2,) float32)");
  Tensor cut({p.numel() - 8}, fl::DType::UInt8);
  std::memcpy(cut.raw(), p.raw(), static_cast<size_t>(cut.numel()));
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::unpack_strings(cut, "cut"); }), "runs past the end");
  EXPECT_FALSE(fl::is_packed_strings(Tensor::from<uint8_t>({16}, std::vector<uint8_t>(16, 0))));
}

TEST(Strings, Utf8) {
  std::u32string cps;
  size_t bad = 0;
  ASSERT_TRUE(fl::utf8_decode("aé€😀", &cps, &bad));
  EXPECT_EQ(cps, (std::u32string{U'a', U'é', U'€', U'😀'}));
  EXPECT_EQ(fl::utf8_encode(cps), "aé€😀");
  EXPECT_FALSE(fl::utf8_decode("ab\xc3", &cps, &bad));  // cut short
  EXPECT_EQ(bad, 2u);
  EXPECT_FALSE(fl::utf8_decode("\xc0\xaf", &cps, &bad));      // overlong '/'
  EXPECT_FALSE(fl::utf8_decode("\xed\xa0\x80", &cps, &bad));  // a surrogate
}

TEST_F(OnnxOps, StringNormalizerStopwordsAndCase) {
  Model md(10);
  string_input(md, "x", 1);
  auto* n = md.node("StringNormalizer", {"x"}, {"y"});
  set_string(n, "case_change_action", "UPPER");
  set_strings(n, "stopwords", {"monday", "Église"});
  auto job = load(md);
  const auto run = [&](const Strings& in) {
    return strings_of(job->run({fl::pack_strings(in, {static_cast<int64_t>(in.size())})})[0]);
  };
  // Case-insensitive stopwords (the default), Unicode upper case.
  auto y = run({"Monday", "tuesday", "éclair", "ÉGLISE", "straße"});
  EXPECT_EQ(y.shape, (Shape{3}));
  // (ß has no one-letter upper case: the simple mapping keeps it.)
  EXPECT_EQ(y.items, (Strings{"TUESDAY", "ÉCLAIR", "STRAßE"}));
  // Everything removed: one empty string, as ONNX specifies.
  y = run({"MONDAY", "monday"});
  EXPECT_EQ(y.shape, (Shape{1}));
  EXPECT_EQ(y.items, (Strings{""}));
  // Case changes decode UTF-8: bad bytes are named.
  EXPECT_CONTAINS(fl::testing::error_of([&] { run({"ok", "bad\xff"}); }),
                  "[string_normalizer] string 1 is not valid UTF-8 (at byte 3)");
  // So do case-blind stopwords, a bad stopword at load.
  fl::session::reset();
  Model bad(10);
  string_input(bad, "x", 1);
  set_strings(bad.node("StringNormalizer", {"x"}, {"y"}), "stopwords", {"fine", "\xc3("});
  EXPECT_CONTAINS(bad.load_error(), "stopword 1 is not valid UTF-8 (at byte 0)");
}

TEST_F(OnnxOps, StringNormalizerTwoDimsCaseSensitiveLower) {
  Model md(10);
  string_input(md, "x", 2);
  auto* n = md.node("StringNormalizer", {"x"}, {"y"});
  set_string(n, "case_change_action", "LOWER");
  set_int(n, "is_case_sensitive", 1);
  set_strings(n, "stopwords", {"Monday"});
  auto job = load(md);
  const auto y = strings_of(job->run({fl::pack_strings({"Monday", "monday", "TUESDAY"}, {1, 3})})[0]);
  EXPECT_EQ(y.shape, (Shape{1, 2}));
  EXPECT_EQ(y.items, (Strings{"monday", "tuesday"}));
  // (2, C) is not a StringNormalizer input: named per call.
  EXPECT_CONTAINS(fl::testing::error_of([&] { job->run({fl::pack_strings({"a", "b"}, {2, 1})}); }),
                  "x must be (C,) or (1, C) strings, got (2, 1)");
}

TEST_F(OnnxOps, StringNormalizerRefusesLocalesWithTheirOwnCaseRules) {
  Model md(10);
  string_input(md, "x", 1);
  auto* n = md.node("StringNormalizer", {"x"}, {"y"});
  set_string(n, "case_change_action", "UPPER");
  set_string(n, "locale", "tr_TR.UTF-8");
  const std::string e = md.load_error();
  EXPECT_CONTAINS(e, "node 'StringNormalizer' (StringNormalizer)");
  EXPECT_CONTAINS(e, "locale \"tr_TR.UTF-8\" has its own case rules");
}

TEST_F(OnnxOps, CastStringsToNumbers) {
  for (auto [to, dt] : {std::pair{::onnx::TensorProto::FLOAT, fl::DType::Float32},
                        std::pair{::onnx::TensorProto::DOUBLE, fl::DType::Float64}}) {
    fl::session::reset();
    Model md(13);
    string_input(md, "x", 2);
    set_int(md.node("Cast", {"x"}, {"y"}), "to", to);
    auto job = load(md);
    const auto y = job->run({fl::pack_strings({"1.5", " -2e3 ", "NaN", "+INF", "-inf", "1E-5"}, {2, 3})})[0];
    ASSERT_EQ(y.shape(), (Shape{2, 3}));
    ASSERT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.at(0), 1.5);
    EXPECT_EQ(y.at(1), -2000);
    EXPECT_TRUE(std::isnan(y.at(2)));
    EXPECT_EQ(y.at(3), INFINITY);
    EXPECT_EQ(y.at(4), -INFINITY);
    EXPECT_NEAR(y.at(5), 1e-5, 1e-12);
    // A string that is no number: named with its position and text; past
    // double's range: inf or 0, but only for the whole string.
    EXPECT_CONTAINS(fl::testing::error_of([&] { job->run({fl::pack_strings({"1", "abc"}, {1, 2})}); }),
                    "[string_parse] string 1 of (1, 2) (\"abc\") is not a number");
    const auto big = job->run({fl::pack_strings({"1e999", "-1e999", "1e-999"}, {1, 3})})[0];
    EXPECT_EQ(big.at(0), INFINITY);
    EXPECT_EQ(big.at(1), -INFINITY);
    EXPECT_EQ(big.at(2), 0.0);
    for (const char* bad : {"1e999xyz", "1e-999zz", "--1", "1.5 2"})
      EXPECT_CONTAINS(fl::testing::error_of([&] { job->run({fl::pack_strings({bad}, {1, 1})}); }), "is not a number")
          << bad;
    // Another rank than the model declares.
    EXPECT_CONTAINS(fl::testing::error_of([&] { job->run({fl::pack_strings({"1"}, {1})}); }),
                    "the job was defined for rank 2");
  }
  Model md(13);
  string_input(md, "x", 1);
  set_int(md.node("Cast", {"x"}, {"y"}), "to", ::onnx::TensorProto::INT8);
  auto job = load(md);
  const auto y = job->run({fl::pack_strings({"100.9", "-128", "+7", "-0.5"}, {4})})[0];
  ASSERT_EQ(y.dtype(), fl::DType::Int8);
  EXPECT_EQ(y.to_vector<int8_t>(), (std::vector<int8_t>{100, -128, 7, 0}));  // truncated toward zero
  EXPECT_CONTAINS(fl::testing::error_of([&] { job->run({fl::pack_strings({"128"}, {1})}); }),
                  "string 0 of (1,) (\"128\") is not a number that int8 holds");
  for (const char* bad : {"+-5", "++5", "5x"})
    EXPECT_CONTAINS(fl::testing::error_of([&] { job->run({fl::pack_strings({bad}, {1})}); }),
                    "is not a number that int8 holds")
        << bad;
}

TEST_F(OnnxOps, CastNumbersToStringsAsNumPyWritesThem) {
  Model md(13);
  const Tensor x = Tensor::from<float>({9}, {0.25f, 100.f, 1e-5f, 1.5e16f, -0.f, NAN, -INFINITY, 0.1f, 0.0001f});
  md.input("x", x);
  set_int(md.node("Cast", {"x"}, {"y"}), "to", ::onnx::TensorProto::STRING);
  const auto y = strings_of(md.run(x)[0]);
  EXPECT_EQ(y.shape, (Shape{9}));
  // (float32's nearest to 0.0001 is just below 1e-4: NumPy writes it "1e-04" too.)
  EXPECT_EQ(y.items, (Strings{"0.25", "100.0", "1e-05", "1.5e+16", "-0.0", "nan", "-inf", "0.1", "1e-04"}));
  // float16 with its own shortest digits, as NumPy writes np.float16.
  fl::session::reset();
  Model mh(13);
  const Tensor xh = Tensor::from<fl::float16>({3}, {fl::float16(0.1), fl::float16(1e-5), fl::float16(65504.0)});
  mh.input("x", xh);
  set_int(mh.node("Cast", {"x"}, {"y"}), "to", ::onnx::TensorProto::STRING);
  EXPECT_EQ(strings_of(mh.run(xh)[0]).items, (Strings{"0.1", "1e-05", "65500.0"}));
  fl::session::reset();
  Model mi(13);
  const Tensor xi = Tensor::from<int64_t>({2, 2}, {-9223372036854775807LL - 1, 0, 42, 7});
  mi.input("x", xi);
  set_int(mi.node("Cast", {"x"}, {"y"}), "to", ::onnx::TensorProto::STRING);
  const auto yi = strings_of(mi.run(xi)[0]);
  EXPECT_EQ(yi.shape, (Shape{2, 2}));
  EXPECT_EQ(yi.items, (Strings{"-9223372036854775808", "0", "42", "7"}));
}

// Strings through Cast(STRING), Identity and CastLike back to numbers; a
// string constant (Constant value_strings) compared to an input.
TEST_F(OnnxOps, StringsRoundTripThroughCastLikeAndConstants) {
  Model md(15);
  const Tensor x = Tensor::from<double>({3}, {0.5, -3.0, 1e20});
  md.input("x", x);
  set_int(md.node("Cast", {"x"}, {"s"}), "to", ::onnx::TensorProto::STRING);
  md.node("Identity", {"s"}, {"t"});
  md.node("CastLike", {"t", "x"}, {"y"});
  set_strings(md.node("Constant", {}, {"words"}), "value_strings", {"a", "b"});
  const auto r = md.run(x);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(strings_of(r[0]).items, (Strings{"0.5", "-3.0", "1e+20"}));
  EXPECT_EQ(strings_of(r[1]).items, (Strings{"0.5", "-3.0", "1e+20"}));
  EXPECT_EQ(r[2].to_vector<double>(), (std::vector<double>{0.5, -3.0, 1e20}));
  EXPECT_EQ(strings_of(r[3]).items, (Strings{"a", "b"}));
}

TEST_F(OnnxOps, TfIdfVectorizerOverStringTokens) {
  // The same pool as strings and as ids must count alike.
  auto model = [](bool strings) {
    auto md = std::make_unique<Model>(9);
    if (strings) string_input(*md, "x", 2);
    else md->input("x", Tensor::from<int64_t>({2, 4}, std::vector<int64_t>(8, 0)));
    auto* n = md->node("TfIdfVectorizer", {"x"}, {"y"});
    set_string(n, "mode", "TF");
    set_int(n, "min_gram_length", 1);
    set_int(n, "max_gram_length", 2);
    set_ints(n, "ngram_counts", {0, 3});
    set_ints(n, "ngram_indexes", {0, 1, 2, 3, 4});
    if (strings) set_strings(n, "pool_strings", {"cat", "dog", "the", "the", "cat", "the", "dog"});
    else set_ints(n, "pool_int64s", {1, 2, 3, 3, 1, 3, 2});
    return md;
  };
  auto s = model(true), i = model(false);
  const auto ys = s->run({fl::pack_strings({"the", "cat", "the", "dog", "a", "cat", "bird", "the"}, {2, 4})})[0];
  const auto yi = i->run({Tensor::from<int64_t>({2, 4}, {3, 1, 3, 2, 0, 1, 0, 3})})[0];
  ASSERT_EQ(ys.shape(), (Shape{2, 5}));
  EXPECT_EQ(ys.to_vector<float>(), yi.to_vector<float>());
  EXPECT_EQ(ys.to_vector<float>(), (std::vector<float>{1, 1, 2, 1, 1, 1, 0, 1, 0, 0}));
}

TEST_F(OnnxOps, StringsReachOnlyTheOpsThatTakeThem) {
  Model md(13);
  string_input(md, "x", 1);
  md.node("Add", {"x", "x"}, {"y"});
  const std::string e = md.load_error();
  EXPECT_CONTAINS(e, "node 'Add' (Add)");
  EXPECT_CONTAINS(e, "input 'x' is a tensor(string, rank 1); Jobflow's Add does not take strings");
  // pool_int64s with string tokens, and the reverse.
  fl::session::reset();
  Model mt(9);
  string_input(mt, "x", 1);
  auto* n = mt.node("TfIdfVectorizer", {"x"}, {"y"});
  set_string(n, "mode", "TF");
  set_ints(n, "ngram_counts", {0});
  set_ints(n, "ngram_indexes", {0});
  set_ints(n, "pool_int64s", {1});
  EXPECT_CONTAINS(mt.load_error(), "string tokens need pool_strings, the model gives pool_int64s");
}

TEST_F(OnnxOps, StringJobsAreInspectedAndRefuseToBeSaved) {
  Model md(10);
  string_input(md, "x", 1);
  md.node("StringNormalizer", {"x"}, {"y"});
  std::string bytes;
  ASSERT_TRUE(md.m.SerializeToString(&bytes));
  const fs::path d = tmp_dir("strings");
  std::ofstream(d / "m.onnx", std::ios::binary) << bytes;
  const std::string text = fl::onnx::inspect((d / "m.onnx").string()).str();
  EXPECT_CONTAINS(text, "strings: jobflow/strings.h): x = tensor(string, rank 1); y = tensor(string, rank 1);");
  auto job = load(md);
  EXPECT_EQ(job->signature().inputs[0].dtype, fl::DType::UInt8);
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::onnx::save(*job, (d / "job.onnx").string()); }),
                  "op 'string_normalizer' (node ");
  fs::remove_all(d);
}

// Whether a value is a string tensor comes from the model's types, never
// from its bytes: a uint8 initializer that begins with the packed form's
// magic word is bytes.
TEST_F(OnnxOps, BytesThatLookPackedAreNotStrings) {
  Model md(13);
  std::vector<uint8_t> bytes(24, 1);
  const int64_t magic = fl::kStringsMagic;
  std::memcpy(bytes.data(), &magic, 8);
  const Tensor x = Tensor::from<uint8_t>({24}, std::vector<uint8_t>(24, 1));
  md.input("x", x);
  md.init("w", Tensor::from<uint8_t>({24}, bytes));
  md.node("Add", {"x", "w"}, {"y"});
  const auto y = md.run(x)[0];
  ASSERT_EQ(y.dtype(), fl::DType::UInt8);
  EXPECT_EQ(y.data<uint8_t>()[8], 2);
  EXPECT_EQ(y.data<uint8_t>()[0], static_cast<uint8_t>(bytes[0] + 1));
}

TEST(Strings, NpyFilesOfStrings) {
  const fs::path d = tmp_dir("npy_strings");
  const fl::UnpackedStrings s{{2, 2}, {"monday", "", "éclair", "x"}};
  fl::data::write_npy_strings((d / "u.npy").string(), s);
  auto r = fl::data::read_npy_strings((d / "u.npy").string());
  EXPECT_EQ(r.shape, s.shape);
  EXPECT_EQ(r.items, s.items);
  // Not UTF-8: written as bytes (|S) and read back alike.
  const fl::UnpackedStrings b{{2}, {"\xff\xfe", "ok"}};
  fl::data::write_npy_strings((d / "b.npy").string(), b);
  r = fl::data::read_npy_strings((d / "b.npy").string());
  EXPECT_EQ(r.items, b.items);
  // read_npy says what to use instead.
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::data::read_npy((d / "u.npy").string()); }),
                  "element type '<U6' holds strings");
  // A huge count of empty strings (|S0 takes no bytes in the file) is
  // refused before anything is allocated; a surrogate is named in hex.
  auto raw_npy = [&](const std::string& name, const std::string& descr, const std::string& shape,
                     const std::string& data) {
    // (No padding to 64 bytes: readers take the header's length as given.)
    const std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }\n";
    std::string f("\x93NUMPY\x01\x00", 8);
    f += static_cast<char>(h.size() & 0xff);
    f += static_cast<char>(h.size() >> 8);
    std::ofstream((d / name).string(), std::ios::binary) << f << h << data;
    return (d / name).string();
  };
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::data::read_npy_strings(raw_npy("z.npy", "|S0", "(100000000,)", "")); }),
                  "refused (more than 2^20 empty strings)");
  EXPECT_EQ(fl::data::read_npy_strings(raw_npy("z3.npy", "|S0", "(3,)", "")).items, (Strings{"", "", ""}));
  EXPECT_CONTAINS(fl::testing::error_of([&] {
                    fl::data::read_npy_strings(raw_npy("sur.npy", "<U1", "(1,)", std::string("\x00\xd8\x00\x00", 4)));
                  }),
                  "element 0 holds U+D800, not a Unicode character");
  // Bool files read (any nonzero byte is true).
  EXPECT_EQ(fl::data::read_npy(raw_npy("b.npy", "|b1", "(3,)", std::string("\x01\x00\x02", 3))).to_vector<bool>(),
            (std::vector<bool>{true, false, true}));
  fl::data::write_npy((d / "f.npy").string(), Tensor::from<float>({1}, {1.f}));
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::data::read_npy_strings((d / "f.npy").string()); }),
                  "element type '<f4' is not strings (<U or |S)");
  fs::remove_all(d);
}

}  // namespace
