// The plugin's numeric helpers (plugin/decode, plugin/track) on hand-made
// tensors with known answers: NMS, the YOLO / SSD / detection heads, DB
// text boxes, CTC, class maps, the assignment and SORT.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "decode/boxes.h"
#include "decode/segmentation.h"
#include "decode/text.h"
#include "track/sort.h"

namespace dec = jobflow::decode;
namespace trk = jobflow::track;

namespace {

constexpr float kPi = 3.14159265358979323846f;

void expect_box(const dec::Box& b, float x1, float y1, float x2, float y2, float score, int label) {
  EXPECT_NEAR(b.x1, x1, 1e-4);
  EXPECT_NEAR(b.y1, y1, 1e-4);
  EXPECT_NEAR(b.x2, x2, 1e-4);
  EXPECT_NEAR(b.y2, y2, 1e-4);
  EXPECT_NEAR(b.score, score, 1e-4);
  EXPECT_EQ(b.label, label);
}

}  // namespace

TEST(Nms, PerClassSuppressionAndTopK) {
  std::vector<dec::Box> in = {
      {20, 20, 30, 30, 0.6f, 0},  // far from the others
      {1, 1, 11, 11, 0.8f, 0},    // IoU 81/119 = 0.68 with the first kept box
      {0, 0, 10, 10, 0.9f, 0},
      {1, 1, 11, 11, 0.7f, 1},    // same place, other class: kept
  };
  EXPECT_NEAR(dec::iou(in[1], in[2]), 81.f / 119.f, 1e-6);
  auto out = dec::nms(in, 0.5f, 0);
  ASSERT_EQ(out.size(), 3u);
  expect_box(out[0], 0, 0, 10, 10, 0.9f, 0);
  expect_box(out[1], 1, 1, 11, 11, 0.7f, 1);
  expect_box(out[2], 20, 20, 30, 30, 0.6f, 0);
  // class-agnostic: the class-1 box goes too
  EXPECT_EQ(dec::nms(in, 0.5f, 0, false).size(), 2u);
  // a looser IoU threshold keeps the overlapping box
  EXPECT_EQ(dec::nms(in, 0.7f, 0).size(), 4u);
  EXPECT_EQ(dec::nms(in, 0.5f, 2).size(), 2u);
  // equal scores keep their input order
  auto tie = dec::nms({{0, 0, 1, 1, 0.5f, 3}, {5, 5, 6, 6, 0.5f, 4}}, 0.5f, 0);
  ASSERT_EQ(tie.size(), 2u);
  EXPECT_EQ(tie[0].label, 3);
}

TEST(Heads, YoloV8ChannelsFirst) {
  // (4 + 2, 3): rows cx, cy, w, h, class 0, class 1; one column per candidate
  const std::vector<float> t = {
      50, 10, 80,   // cx
      50, 10, 20,   // cy
      20, 4, 10,    // w
      10, 4, 30,    // h
      0.1f, 0.2f, 0.7f,  // class 0
      0.9f, 0.3f, 0.1f,  // class 1
  };
  auto boxes = dec::decode_yolov8(dec::Table::transposed(t.data(), 3, 6), 0.5f);
  ASSERT_EQ(boxes.size(), 2u);
  expect_box(boxes[0], 40, 45, 60, 55, 0.9f, 1);
  expect_box(boxes[1], 75, 5, 85, 35, 0.7f, 0);
}

TEST(Heads, YoloV5ObjectnessTimesClass) {
  // (2, 5 + 2) rows: cx, cy, w, h, objectness, class 0, class 1
  const std::vector<float> t = {
      10, 20, 4, 8, 0.8f, 0.25f, 0.75f,  // 0.6 for class 1
      30, 30, 2, 2, 0.9f, 0.5f, 0.5f,    // 0.45: below
  };
  auto boxes = dec::decode_yolov5(dec::Table::row_major(t.data(), 2, 7), 0.5f);
  ASSERT_EQ(boxes.size(), 1u);
  expect_box(boxes[0], 8, 16, 12, 24, 0.6f, 1);
}

TEST(Heads, SsdAnchorsAndScales) {
  const std::vector<dec::Anchor> anchors = {{0.5f, 0.5f, 0.2f, 0.2f}, {0.1f, 0.1f, 0.1f, 0.1f}};
  const std::vector<float> deltas = {1, -1, 0, 5 * std::log(2.f),  // anchor 0
                                     0, 0, 0, 0};
  const std::vector<float> logits = {0, 2, 0,   // anchor 0: class 1 at e^2 / (2 + e^2)
                                     5, 0, 0};  // anchor 1: background
  dec::SsdParams p;
  p.input_width = p.input_height = 100;
  auto boxes = dec::decode_ssd(dec::Table::row_major(deltas.data(), 2, 4), dec::Table::row_major(logits.data(), 2, 3),
                               anchors, p, 0.5f);
  ASSERT_EQ(boxes.size(), 1u);
  const float e2 = std::exp(2.f);
  // cx = 0.5 + 0.1 * 0.2 = 0.52, cy = 0.48, w = 0.2, h = 0.4
  expect_box(boxes[0], 42, 28, 62, 68, e2 / (2 + e2), 1);
  // probabilities given: no softmax
  p.softmax = false;
  const std::vector<float> probs = {0.1f, 0.3f, 0.6f, 1, 0, 0};
  boxes = dec::decode_ssd(dec::Table::row_major(deltas.data(), 2, 4), dec::Table::row_major(probs.data(), 2, 3),
                          anchors, p, 0.5f);
  ASSERT_EQ(boxes.size(), 1u);
  EXPECT_EQ(boxes[0].label, 2);
  EXPECT_NEAR(boxes[0].score, 0.6f, 1e-6);
}

TEST(Heads, AnchorsFile) {
  std::vector<dec::Anchor> a;
  std::string err;
  ASSERT_TRUE(dec::parse_anchors("0.5 0.5 0.2 0.2\n0.1,0.2,0.3,0.4\r\n\n", &a, &err)) << err;
  ASSERT_EQ(a.size(), 2u);
  EXPECT_FLOAT_EQ(a[1].h, 0.4f);
  EXPECT_FALSE(dec::parse_anchors("0.5 0.5 0.2\n", &a, &err));
  EXPECT_EQ(err, "line 1: expected four numbers \"cx cy w h\", got \"0.5 0.5 0.2\"");
}

TEST(Heads, Detections) {
  const std::vector<float> boxes = {10, 20, 30, 40, 50, 50, 40, 60};  // the second given x2 < x1
  const std::vector<float> scores = {0.9f, 0.6f}, labels = {3, 7};
  auto out = dec::decode_detections(dec::Table::row_major(boxes.data(), 2, 4), scores.data(), labels.data(), 0.5f);
  ASSERT_EQ(out.size(), 2u);
  expect_box(out[0], 10, 20, 30, 40, 0.9f, 3);
  expect_box(out[1], 40, 50, 50, 60, 0.6f, 7);
  EXPECT_EQ(dec::decode_detections(dec::Table::row_major(boxes.data(), 2, 4), scores.data(), nullptr, 0.7f).size(),
            1u);
}

TEST(Text, MinAreaRectOfARotatedSquare) {
  // a 10 x 6 rectangle turned by 30 degrees about (50, 40)
  const float a = kPi / 6;
  std::vector<float> xy;
  for (float u : {-5.f, 5.f})
    for (float v : {-3.f, 3.f}) {
      xy.push_back(50 + u * std::cos(a) - v * std::sin(a));
      xy.push_back(40 + u * std::sin(a) + v * std::cos(a));
    }
  auto r = dec::min_area_rect(xy);
  EXPECT_NEAR(r.cx, 50, 1e-4);
  EXPECT_NEAR(r.cy, 40, 1e-4);
  EXPECT_NEAR(r.w, 10, 1e-4);
  EXPECT_NEAR(r.h, 6, 1e-4);
  EXPECT_NEAR(r.angle, a, 1e-5);
  // turned by 70 degrees: reported as -20 with w and h swapped
  xy.clear();
  const float b = 70 * kPi / 180;
  for (float u : {-5.f, 5.f})
    for (float v : {-3.f, 3.f}) {
      xy.push_back(u * std::cos(b) - v * std::sin(b));
      xy.push_back(u * std::sin(b) + v * std::cos(b));
    }
  r = dec::min_area_rect(xy);
  EXPECT_NEAR(r.w, 6, 1e-4);
  EXPECT_NEAR(r.h, 10, 1e-4);
  EXPECT_NEAR(r.angle, b - kPi / 2, 1e-5);
  float c[8];
  dec::corners(dec::RotatedBox{10, 20, 4, 2, 0, 0}, c);
  const float want[8] = {8, 19, 12, 19, 12, 21, 8, 21};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(c[i], want[i]);
}

TEST(Text, DbBoxes) {
  const size_t H = 30, W = 60;
  std::vector<float> map(H * W, 0.f);
  auto fill = [&](size_t x0, size_t y0, size_t w, size_t h, float v) {
    for (size_t y = y0; y < y0 + h; ++y)
      for (size_t x = x0; x < x0 + w; ++x) map[y * W + x] = v;
  };
  fill(5, 4, 20, 6, 0.9f);    // a text line: pixel centres x 5..24, y 4..9
  fill(40, 3, 10, 5, 0.45f);  // above the binary threshold, below the box threshold
  fill(30, 20, 2, 2, 0.95f);  // too small
  fill(35, 18, 16, 8, 0.8f);  // a second line, lower
  dec::DbParams p;
  auto boxes = dec::db_boxes(map.data(), H, W, p);
  ASSERT_EQ(boxes.size(), 2u);
  // first: 19 x 5 between pixel centres, grown by 19*5*1.5 / (2*24) on each side
  const float d = 19.f * 5.f * 1.5f / 48.f;
  EXPECT_NEAR(boxes[0].cx, 14.5f, 1e-4);
  EXPECT_NEAR(boxes[0].cy, 6.5f, 1e-4);
  EXPECT_NEAR(boxes[0].w, 19 + 2 * d, 1e-4);
  EXPECT_NEAR(boxes[0].h, 5 + 2 * d, 1e-4);
  EXPECT_NEAR(boxes[0].angle, 0, 1e-6);
  EXPECT_NEAR(boxes[0].score, 0.9f, 1e-5);
  EXPECT_NEAR(boxes[1].cx, 42.5f, 1e-4);
  EXPECT_NEAR(boxes[1].cy, 21.5f, 1e-4);
  // a lower box threshold keeps the faint region: on the first line (centres
  // 1.5 pixels apart), right of the first box
  p.box_threshold = 0.4f;
  boxes = dec::db_boxes(map.data(), H, W, p);
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_NEAR(boxes[0].cx, 14.5f, 1e-4);
  EXPECT_NEAR(boxes[1].cx, 44.5f, 1e-4);
  EXPECT_NEAR(boxes[1].cy, 5.f, 1e-4);
  EXPECT_NEAR(boxes[2].cx, 42.5f, 1e-4);
  // min-size 6 drops the 5-pixel-high line too
  p.min_size = 6;
  EXPECT_EQ(dec::db_boxes(map.data(), H, W, p).size(), 1u);
}

TEST(Text, CtcGreedy) {
  // classes: blank, a, b, c; best per step: a a _ a b b
  const int T = 6, C = 4;
  const int best[T] = {1, 1, 0, 1, 2, 2};
  std::vector<float> probs(T * C, 0.1f);
  for (int t = 0; t < T; ++t) probs[t * C + best[t]] = 0.7f;
  probs[3 * C + 1] = 0.5f;
  auto r = dec::ctc_greedy(probs.data(), T, C, 0, false);
  ASSERT_EQ(r.classes, (std::vector<int>{1, 1, 2}));
  EXPECT_NEAR(r.confidence, (0.7f + 0.5f + 0.7f) / 3, 1e-6);
  EXPECT_EQ(dec::ctc_text(r.classes, {"a", "b", "c"}, 0), "aab");
  // logits: the same classes; the confidence is the softmax of the best
  auto l = dec::ctc_greedy(probs.data(), T, C, 0, true);
  EXPECT_EQ(l.classes, r.classes);
  const double z = std::exp(0.7) + 3 * std::exp(0.1);
  EXPECT_NEAR(l.confidence, ((std::exp(0.7) / z) * 2 + std::exp(0.5) / (std::exp(0.5) + 3 * std::exp(0.1))) / 3,
              1e-5);
  // a blank at the end of the classes; out-of-dictionary classes
  EXPECT_EQ(dec::ctc_text({0, 1}, {"x", "y"}, 2), "xy");
  EXPECT_EQ(dec::ctc_text({5}, {"x"}, 0), "\xEF\xBF\xBD");
  EXPECT_TRUE(dec::ctc_greedy(probs.data(), 0, C, 0, false).classes.empty());
  EXPECT_EQ(dec::split_lines("a\r\nb\n\nc\n"), (std::vector<std::string>{"a", "b", "", "c"}));
}

TEST(Segmentation, ArgmaxMap) {
  // 3 classes over 2 x 2 pixels, (C, H, W)
  const std::vector<float> s = {0.9f, 0.1f, 0.2f, 0.3f,   // class 0
                                0.05f, 0.8f, 0.2f, 0.3f,  // class 1 (ties with 0 at pixel 3)
                                0.05f, 0.1f, 0.6f, 0.1f};
  uint8_t map[4];
  dec::argmax_map(s.data(), 3, 2, 2, map);
  EXPECT_EQ(map[0], 0);
  EXPECT_EQ(map[1], 1);
  EXPECT_EQ(map[2], 2);
  EXPECT_EQ(map[3], 0);
  EXPECT_EQ(dec::classes_present(map, 4), (std::vector<unsigned>{0, 1, 2}));
}

TEST(Assignment, MinimumTotalCost) {
  // optimum 1 + 2 + 2 = 5 (a greedy pick of the 0 first would pay 0 + 3 + 3... = 6)
  EXPECT_EQ(trk::assign_min_cost({4, 1, 3, 2, 0, 5, 3, 2, 2}, 3, 3), (std::vector<int>{1, 0, 2}));
  // more rows than columns: the cheapest rows win
  EXPECT_EQ(trk::assign_min_cost({1, 9, 9, 1, 0, 9}, 3, 2), (std::vector<int>{-1, 1, 0}));
  EXPECT_EQ(trk::assign_min_cost({5, 1, 2}, 1, 3), (std::vector<int>{1}));
  EXPECT_TRUE(trk::assign_min_cost({}, 0, 3).empty());
}

namespace {

trk::Detection box_at(float cx, float cy, float size, int label = 0) {
  return {{cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2}, label};
}

// The confirmed id of each detection after one frame (0 = tentative).
std::vector<uint64_t> ids(trk::Sort& s, const std::vector<trk::Detection>& d) {
  std::vector<uint64_t> out;
  for (size_t i : s.update(d)) out.push_back(s.tracks()[i].confirmed ? s.tracks()[i].id : 0);
  return out;
}

}  // namespace

TEST(Sort, IdStableThroughAMissedDetection) {
  trk::Sort s({30, 3, 0.3f, true});
  // first frames (warming up): confirmed at once
  for (int f = 0; f < 12; ++f) {
    const float x = 20 + 6.f * f;
    if (f == 6 || f == 7) {  // two frames without the detection
      EXPECT_TRUE(ids(s, {}).empty());
      continue;
    }
    EXPECT_EQ(ids(s, {box_at(x, 50, 20)}), (std::vector<uint64_t>{1})) << "frame " << f;
  }
  EXPECT_EQ(s.tracks().size(), 1u);
}

TEST(Sort, NewTracksWaitForMinHitsAndDieAfterMaxAge) {
  trk::Sort s({2, 3, 0.3f, true});
  for (int f = 0; f < 3; ++f) ids(s, {box_at(20, 20, 10)});  // warm-up frames
  // a new object: tentative for two frames, confirmed with id 2 on the third
  EXPECT_EQ(ids(s, {box_at(20, 20, 10), box_at(100, 100, 10)}), (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(ids(s, {box_at(20, 20, 10), box_at(100, 100, 10)}), (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(ids(s, {box_at(20, 20, 10), box_at(100, 100, 10)}), (std::vector<uint64_t>{1, 2}));
  // object 1 unseen for 3 frames > max-age 2: gone; it comes back as a new track
  for (int f = 0; f < 3; ++f) ids(s, {box_at(100, 100, 10)});
  EXPECT_EQ(s.tracks().size(), 1u);
  EXPECT_EQ(ids(s, {box_at(20, 20, 10), box_at(100, 100, 10)}), (std::vector<uint64_t>{0, 2}));
  // another label at the same place is another track
  EXPECT_EQ(ids(s, {box_at(100, 100, 10, 5), box_at(100, 100, 10)}), (std::vector<uint64_t>{0, 2}));
}

TEST(Sort, CrossingObjectsKeepTheirIds) {
  trk::Sort s({5, 1, 0.1f, true});
  // A moves right, B moves left, 12 px apart vertically; they overlap
  // around frame 10 (IoU up to 0.42), the motion model tells them apart.
  uint64_t id_a = 0, id_b = 0;
  for (int f = 0; f <= 20; ++f) {
    const float xa = 10 + 10.f * f, xb = 210 - 10.f * f;
    auto got = ids(s, {box_at(xa, 100, 30), box_at(xb, 112, 30)});
    ASSERT_EQ(got.size(), 2u);
    if (f == 0) {
      id_a = got[0];
      id_b = got[1];
      EXPECT_NE(id_a, id_b);
    }
    EXPECT_EQ(got[0], id_a) << "frame " << f;
    EXPECT_EQ(got[1], id_b) << "frame " << f;
  }
}

TEST(Sort, KalmanPredictsConstantVelocity) {
  trk::BoxKalman k({0, 0, 10, 10});
  for (int f = 1; f <= 10; ++f) {
    k.predict();
    k.update({4.f * f, 0, 4.f * f + 10, 10});
  }
  EXPECT_NEAR(k.vx(), 4, 0.2);
  k.predict();
  const trk::Rect r = k.rect();
  EXPECT_NEAR((r.x1 + r.x2) / 2, 44 + 5, 0.5);
  EXPECT_NEAR(r.x2 - r.x1, 10, 0.3);
}
