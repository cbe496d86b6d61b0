// ONNX rows of resize (ops/resize.cpp): Resize (opsets 10, 11, 13, 18) and
// Upsample (opsets 7 and 9) import; resize exports as Resize (registry.h).
#include <cmath>
#include <set>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

namespace jobflow::onnx {
namespace {

// Resize-10 and Upsample round an asymmetric coordinate down when
// upsampling and up when downsampling (ONNX Runtime's legacy rule): one
// nearest_mode for the whole node unless it does both.
std::string legacy_nearest(Importer& I, const std::vector<double>& scales) {
  bool up = false, down = false;
  for (double s : scales) (s > 1 ? up : s < 1 ? down : up) |= true;
  if (up && down) I.unsupported(I.node->op_type() + "(nearest, upsampling and downsampling at once)");
  return down ? "ceil" : "floor";
}

std::vector<double> float_values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

void check_dtype(Importer& I, const Blob& x, const std::string& mode) {
  if (mode != "nearest" && !is_floating(x.dtype()))
    I.unsupported(I.node->op_type() + "(" + mode + ", " + dtype_name(x.dtype()) + ")");
}

void check_scales(Importer& I, const std::vector<double>& scales, int rank) {
  if (static_cast<int>(scales.size()) != rank)
    I.err("scales must have " + std::to_string(rank) + " values (one per axis of X), got " +
          std::to_string(scales.size()));
  for (double s : scales)
    if (!(s > 0) || !std::isfinite(s)) I.err("scales must be positive, got " + std::to_string(s));
}

// The output must fit the load limits before the op is built.
void check_out(Importer& I, const Blob& x, const Shape& out) { I.check_size(out, x.dtype(), "Resize result"); }

Shape scaled_shape(const Shape& xs, const std::vector<double>& scales) {
  Shape out(xs.size());
  for (size_t d = 0; d < xs.size(); ++d)  // a dim known at the call stays so (the op's infer says the same)
    out[d] = xs[d] < 0 ? kDynamic : static_cast<int64_t>(std::floor(static_cast<double>(xs[d]) * scales[d]));
  return out;
}

// Upsample-7 (scales attribute) and -9 (scales input): asymmetric
// coordinates, nearest or (bi)linear.
void op_upsample(Importer& I) {
  Blob x = I.in(0);
  std::string mode = I.attr_s("mode", "nearest");
  if (mode == "bilinear") mode = "linear";
  if (mode != "nearest" && mode != "linear") I.err("mode must be nearest or linear, got '" + mode + "'");
  check_dtype(I, x, mode);
  std::vector<double> scales;
  if (I.opset < 9) {
    auto a = I.attr(std::string("scales"), AttributeProto::FLOATS);
    if (!a) I.err("attribute 'scales' is missing");
    for (float f : a->floats()) scales.push_back(f);
  } else {
    scales = float_values(I.cin(1));
  }
  check_scales(I, scales, x.ndim());
  nn::ResizeOptions o;
  o.mode = mode;
  o.coordinate_transformation_mode = "asymmetric";
  if (mode == "nearest") o.nearest_mode = legacy_nearest(I, scales);
  check_out(I, x, scaled_shape(x.shape(), scales));
  I.out(0, nn::resize_scales(x, scales, o));
}

void op_resize(Importer& I) {
  Blob x = I.in(0);
  const int r = x.ndim();
  if (r == 0) I.err("X must have at least one axis");
  nn::ResizeOptions o;
  o.mode = I.attr_s("mode", "nearest");
  if (o.mode != "nearest" && o.mode != "linear" && o.mode != "cubic")
    I.err("mode must be nearest, linear or cubic, got '" + o.mode + "'");
  if (I.opset < 11) {  // Resize-10: X, scales; asymmetric
    if (o.mode == "cubic") I.err("mode must be nearest or linear, got 'cubic'");
    check_dtype(I, x, o.mode);
    const std::vector<double> scales = float_values(I.cin(1));
    check_scales(I, scales, r);
    o.coordinate_transformation_mode = "asymmetric";
    if (o.mode == "nearest") o.nearest_mode = legacy_nearest(I, scales);
    check_out(I, x, scaled_shape(x.shape(), scales));
    I.out(0, nn::resize_scales(x, scales, o));
    return;
  }
  check_dtype(I, x, o.mode);
  static const std::set<std::string> coords = {"half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
                                                "align_corners", "asymmetric",           "tf_half_pixel_for_nn",
                                                "tf_crop_and_resize"};
  o.coordinate_transformation_mode = I.attr_s("coordinate_transformation_mode", "half_pixel");
  if (!coords.count(o.coordinate_transformation_mode))
    I.err("coordinate_transformation_mode '" + o.coordinate_transformation_mode + "' is not one ONNX defines");
  o.nearest_mode = I.attr_s("nearest_mode", "round_prefer_floor");
  if (o.nearest_mode != "round_prefer_floor" && o.nearest_mode != "round_prefer_ceil" && o.nearest_mode != "floor" &&
      o.nearest_mode != "ceil")
    I.err("nearest_mode '" + o.nearest_mode + "' is not one ONNX defines");
  o.cubic_coeff_a = I.attr_f("cubic_coeff_a", -0.75);
  o.exclude_outside = I.attr_i("exclude_outside", 0) != 0;
  o.extrapolation_value = I.attr_f("extrapolation_value", 0.0);
  if (I.attr_i("antialias", 0) != 0) I.unsupported("Resize(antialias)");
  const std::string policy = I.attr_s("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch") I.unsupported("Resize(keep_aspect_ratio_policy=" + policy + ")");
  // axes (opset 18): the axes scales, sizes and roi speak of.
  std::vector<int> axes;
  if (auto a = I.attr_ints("axes")) {
    std::vector<bool> seen(r, false);
    for (int64_t v : *a) {
      const int d = I.axis_of(v, r);
      if (seen[d]) I.err("axis " + std::to_string(v) + " appears twice in axes");
      seen[d] = true;
      axes.push_back(d);
    }
  } else {
    for (int d = 0; d < r; ++d) axes.push_back(d);
  }
  const size_t na = axes.size();
  const Shape& xs = x.shape();
  // Inputs: X, roi, scales, sizes; an empty tensor counts as absent.
  auto given = [&](int i) { return I.has(i) && I.shape(i).size() == 1 && I.shape(i)[0] != 0; };
  if (o.coordinate_transformation_mode == "tf_crop_and_resize") {
    if (!given(1)) I.err("tf_crop_and_resize needs roi");
    const std::vector<double> roi = float_values(I.cin(1));
    if (roi.size() != 2 * na) I.err("roi must have " + std::to_string(2 * na) + " values, got " + std::to_string(roi.size()));
    o.roi.assign(2 * r, 0.0);
    for (int d = 0; d < r; ++d) o.roi[r + d] = 1.0;
    for (size_t i = 0; i < na; ++i) o.roi[axes[i]] = roi[i], o.roi[r + axes[i]] = roi[na + i];
  }
  const bool has_scales = given(2), has_sizes = given(3);
  if (has_scales == has_sizes) I.err("exactly one of scales and sizes must be given");
  // Scales or sizes computed at run time (shapes of dynamic dims): the
  // output's dims are known per call.
  const int runtime = has_scales ? 2 : 3;
  if (!I.is_const(runtime)) {
    if (I.attr_ints("axes")) I.unsupported("Resize(axes with runtime " + std::string(has_scales ? "scales" : "sizes") + ")");
    Blob t = I.in(runtime);
    if (has_scales && t.dtype() != DType::Float32) I.err("scales must be float32, got " + spec_str(t.spec()));
    if (!has_scales && t.dtype() != DType::Int64) I.err("sizes must be int64, got " + spec_str(t.spec()));
    if (t.ndim() != 1 || (t.shape()[0] >= 0 && t.shape()[0] != r))
      I.err(std::string(has_scales ? "scales" : "sizes") + " must have " + std::to_string(r) + " values, got " +
            spec_str(t.spec()));
    I.out(0, has_scales ? nn::resize_scales(x, t, o) : nn::resize(x, t, o));
    return;
  }
  if (has_scales) {
    const std::vector<double> s = float_values(I.cin(2));
    if (s.size() != na) I.err("scales must have " + std::to_string(na) + " values, got " + std::to_string(s.size()));
    std::vector<double> scales(r, 1.0);
    for (size_t i = 0; i < na; ++i) scales[axes[i]] = s[i];
    check_scales(I, scales, r);
    check_out(I, x, scaled_shape(xs, scales));
    I.out(0, nn::resize_scales(x, scales, o));
    return;
  }
  const std::vector<int64_t> s = I.ints_in(3);
  if (s.size() != na) I.err("sizes must have " + std::to_string(na) + " values, got " + std::to_string(s.size()));
  Shape sizes = xs;
  for (size_t i = 0; i < na; ++i) {
    if (s[i] < 0) I.err("sizes must not be negative, got " + std::to_string(s[i]));
    sizes[axes[i]] = s[i];
  }
  check_out(I, x, sizes);
  I.out(0, nn::resize(x, sizes, o));
}

// resize -> Resize (opset 13 form: X, roi, scales, sizes). Scales go as
// float32, which ONNX requires: a scale that is not a float32 has no form.
void export_resize(Exporter& E) {
  const Primitive& p = E.op();
  const std::string& nm = E.name();
  const std::string mode = p.attr_string("mode"), coord = p.attr_string("coordinate_transformation_mode");
  std::string roi, scales, sizes;
  if (coord == "tf_crop_and_resize") {
    const auto v = p.attr_doubles("roi");
    roi = E.constant(nm + "/roi", Tensor::from<double>({static_cast<int64_t>(v.size())}, v));
  }
  const auto sc = p.attr_doubles("scales");
  const int64_t shape_input = p.attr_int("shape_input");
  if (shape_input == 1) {
    scales = E.in(1);
  } else if (shape_input == 2) {
    sizes = E.in(1);
  } else if (!sc.empty()) {
    std::vector<float> f;
    for (double s : sc) {
      if (static_cast<double>(static_cast<float>(s)) != s)
        E.no_form("its scale " + jobflow::onnx_util::number_to_text(s) + " is not a float32, which ONNX's scales are");
      f.push_back(static_cast<float>(s));
    }
    scales = E.constant(nm + "/scales", Tensor::from<float>({static_cast<int64_t>(f.size())}, f));
  } else {
    sizes = E.int64_init(nm + "/sizes", p.attr_ints("sizes"));
  }
  std::vector<std::string> ins{E.in(0), roi, scales};
  if (!sizes.empty()) ins.push_back(sizes);
  ::onnx::NodeProto* n = E.add("Resize", ins, {E.out(0)}, nm);
  Exporter::set_string(n, "mode", mode);
  Exporter::set_string(n, "coordinate_transformation_mode", coord);
  if (mode == "nearest") Exporter::set_string(n, "nearest_mode", p.attr_string("nearest_mode"));
  if (mode == "cubic") {
    E.check_param("cubic_coeff_a", p.attr_double("cubic_coeff_a"));
    Exporter::set_float(n, "cubic_coeff_a", p.attr_double("cubic_coeff_a"));
  }
  if (p.attr_int("exclude_outside")) Exporter::set_int(n, "exclude_outside", 1);
  if (coord == "tf_crop_and_resize") {
    E.check_param("extrapolation_value", p.attr_double("extrapolation_value"));
    Exporter::set_float(n, "extrapolation_value", p.attr_double("extrapolation_value"));
  }
}

// Resize or Upsample imported per call (roi or Upsample-9's scales computed
// in the graph): x's rank and dtype; the forms the row refuses whatever the
// values are refused now, at load.
std::vector<TensorSpec> resize_specs(Importer& I) {
  const TensorSpec x = I.spec(0);
  if (I.attr_i("antialias", 0) != 0) I.unsupported("Resize(antialias)");
  const std::string policy = I.attr_s("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch") I.unsupported("Resize(keep_aspect_ratio_policy=" + policy + ")");
  const std::string mode = I.attr_s("mode", "nearest");
  if (mode != "nearest" && !is_floating(x.dtype)) I.unsupported(I.node->op_type() + "(" + mode + ", " + dtype_name(x.dtype) + ")");
  return {dynamic_spec(x.shape.size(), x.dtype)};
}

void op_grid_sample(Importer& I) {
  Blob x = I.in(0), grid = I.in(1);
  if (x.ndim() != 4) I.unsupported("GridSample(" + std::to_string(x.ndim() - 2) + "-D)");
  if (!is_floating(x.dtype())) I.unsupported(std::string("GridSample(") + dtype_name(x.dtype()) + ")");
  std::string mode = I.attr_s("mode", "bilinear");
  if (mode == "linear") mode = "bilinear";  // opset 20's names
  else if (mode == "cubic") mode = "bicubic";
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") I.err("mode '" + mode + "' is not bilinear, nearest or bicubic");
  const std::string pad = I.attr_s("padding_mode", "zeros");
  if (pad != "zeros" && pad != "border" && pad != "reflection") I.err("padding_mode '" + pad + "' is not zeros, border or reflection");
  I.out(0, nn::grid_sample(x, grid, mode, pad, I.attr_i("align_corners", 0) != 0));
}

}  // namespace

void resize_onnx_rows(OpRows& r) {
  r.import_op("GridSample", op_grid_sample);
  r.export_op(OpKind::GridSample, [](Exporter& E) {
    const Primitive& p = E.op();
    NodeProto* n = E.add_as("GridSample");
    Exporter::set_string(n, "mode", p.attr_string("mode"));
    Exporter::set_string(n, "padding_mode", p.attr_string("padding_mode"));
    Exporter::set_int(n, "align_corners", p.attr_int("align_corners"));
  });
  // roi (and Upsample-9's scales) computed in the graph: imported per call.
  r.import_op("Resize", op_resize).values_per_call({1}, resize_specs);
  r.import_op("Upsample", op_upsample).values_per_call({1}, resize_specs);
  r.export_op(OpKind::Resize, export_resize);
}

}  // namespace jobflow::onnx
