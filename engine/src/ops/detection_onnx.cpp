// ONNX rows of top_k, non_max_suppression and roi_align (ops/detection.cpp)
// (registry.h).
#include <cmath>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

namespace jobflow::onnx {
namespace {

// ---- import ----

void op_topk(Importer& I) {
  Blob x = I.in(0);
  const int r = x.ndim();
  const int64_t axis = I.attr_i("axis", -1);
  I.axis_of(axis, r);
  const bool largest = I.attr_i("largest", 1) != 0, sorted = I.attr_i("sorted", 1) != 0;
  std::vector<Blob> ys;
  if (I.opset < 10) {
    ys = top_k(x, I.attr_i("k", 0), static_cast<int>(axis), largest, sorted);
  } else if (I.is_const(1)) {
    const std::vector<int64_t> k = I.ints_in(1);
    if (k.size() != 1) I.err("K must hold one value, got " + std::to_string(k.size()));
    if (k[0] < 0) I.err("K must not be negative, got " + std::to_string(k[0]));
    ys = top_k(x, k[0], static_cast<int>(axis), largest, sorted);
  } else {  // a count computed in the graph (min(k, candidates)): known per call
    Blob k = I.in(1);
    if (k.dtype() != DType::Int64) I.err(std::string("K must be int64, got ") + dtype_name(k.dtype()));
    ys = top_k(x, k, static_cast<int>(axis), largest, sorted);
  }
  I.out(0, ys[0]);
  I.out(1, ys[1]);
}

void op_nms(Importer& I) {
  const int64_t center = I.attr_i("center_point_box", 0);
  if (center != 0 && center != 1) I.err("center_point_box must be 0 or 1, got " + std::to_string(center));
  Blob boxes = I.in(0), scores = I.in(1);
  Blob max_out = I.has(2) ? I.in(2) : Blob();
  Blob iou = I.has(3) ? I.in(3) : Blob();
  Blob thr = I.has(4) ? I.in(4) : Blob();
  // An input left out before a given one takes its default.
  if (!max_out.defined() && (iou.defined() || thr.defined())) max_out = constant(i64_tensor({0}));
  if (!iou.defined() && thr.defined()) iou = scalar_blob(0.0, DType::Float32);
  I.out(0, non_max_suppression(boxes, scores, max_out, iou, thr, center == 1));
}

void op_roi_align(Importer& I) {
  const std::string mode = I.attr_s("mode", "avg");
  if (mode != "avg" && mode != "max") I.err("mode must be avg or max, got '" + mode + "'");
  // Before opset 16 there was no coordinate_transformation_mode and the ROI
  // was not shifted (what opset 16 calls output_half_pixel).
  const std::string ctm = I.attr_s("coordinate_transformation_mode", I.opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    I.err("coordinate_transformation_mode must be half_pixel or output_half_pixel, got '" + ctm + "'");
  Blob x = I.in(0), rois = I.in(1), bi = I.in(2);
  if (x.dtype() != DType::Float32) I.unsupported(std::string("RoiAlign(") + dtype_name(x.dtype()) + ")");
  I.out(0, roi_align(x, rois, bi, I.attr_i("output_height", 1), I.attr_i("output_width", 1),
                     I.attr_i("sampling_ratio", 0), I.attr_f("spatial_scale", 1.0), mode, ctm == "half_pixel"));
}

// ---- export ----

// top_k -> TopK, a fixed k as an int64 initializer of one value.
void export_topk(Exporter& E) {
  const Primitive& p = E.op();
  std::vector<std::string> ins{E.in(0)};
  const int64_t k = p.attr_int("k");
  ins.push_back(k >= 0 ? E.int64_init(E.name() + "/k", {k}) : E.in(1));
  NodeProto* n = E.add("TopK", ins, {E.out(0), E.out(1)}, E.name());
  Exporter::set_int(n, "axis", p.attr_int("axis"));
  Exporter::set_int(n, "largest", p.attr_int("largest"));
  Exporter::set_int(n, "sorted", p.attr_int("sorted"));
}

void export_roi_align(Exporter& E) {
  const Primitive& p = E.op();
  NodeProto* n = E.add_as("RoiAlign");
  Exporter::set_string(n, "mode", p.attr_string("mode"));
  Exporter::set_int(n, "output_height", p.attr_int("output_height"));
  Exporter::set_int(n, "output_width", p.attr_int("output_width"));
  Exporter::set_int(n, "sampling_ratio", p.attr_int("sampling_ratio"));
  Exporter::set_float(n, "spatial_scale", p.attr_double("spatial_scale"));
  Exporter::set_string(n, "coordinate_transformation_mode", p.attr_string("coordinate_transformation_mode"));
}

}  // namespace

void detection_onnx_rows(OpRows& r) {
  r.import_op("TopK", op_topk, true);
  // The count of boxes kept is known per call (the job runs in segments).
  r.import_op("NonMaxSuppression", op_nms);
  r.import_op("RoiAlign", op_roi_align);

  r.export_op(OpKind::TopK, export_topk);
  r.export_op(OpKind::NonMaxSuppression, [](Exporter& E) {
    Exporter::set_int(E.add_as("NonMaxSuppression"), "center_point_box", E.op().attr_int("center_point_box"));
  });
  r.export_op(OpKind::RoiAlign, export_roi_align);
}

}  // namespace jobflow::onnx
