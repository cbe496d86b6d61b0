// Multi-object tracking in plain C++ (no GStreamer types): SORT (Bewley et
// al. 2016, "Simple Online and Realtime Tracking") — a constant-velocity
// Kalman filter per track over (centre x, centre y, area, aspect ratio),
// detections assigned to the tracks' predicted boxes by maximum total IoU
// (the Hungarian method), new tracks for unmatched detections, tracks
// dropped after max_age frames without a detection. The jobtrack element
// runs one Sort per stream; tests/elements/test_decode.cc checks it on
// synthetic tracks.
//
// One change from the paper's code: a track is confirmed once it has been
// matched min_hits frames in a row (or from the first frame while the
// tracker has seen fewer than min_hits frames) and then stays confirmed, so
// its id is reported again as soon as it is matched after a missed
// detection (SORT waits for min_hits new matches). Ids count from 1 in the
// order tracks are confirmed, so tentative tracks use none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace jobflow::track {

struct Rect {
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

float iou(const Rect& a, const Rect& b);

// Assignment minimising the total cost of a rows x cols matrix (row-major):
// for each row, the column it gets, or -1 (when rows > cols some rows get
// none). Exact (Hungarian method with potentials, O(n^2 m)).
std::vector<int> assign_min_cost(const std::vector<double>& cost, size_t rows, size_t cols);

// Kalman filter of SORT: state (u, v, s, r, du, dv, ds), u, v the box
// centre, s its area, r its aspect ratio (w / h, constant).
class BoxKalman {
 public:
  explicit BoxKalman(const Rect& r);
  void predict();
  void update(const Rect& r);
  Rect rect() const;
  // centre velocity per frame (du, dv)
  float vx() const { return static_cast<float>(x_[4]); }
  float vy() const { return static_cast<float>(x_[5]); }

 private:
  std::array<double, 7> x_{};
  std::array<double, 49> p_{};  // covariance, row-major 7 x 7
};

struct SortParams {
  int max_age = 30;              // frames a track lives without a detection
  int min_hits = 3;              // consecutive matches before a track is confirmed
  float iou_threshold = 0.3f;    // least IoU of a detection with a track's predicted box
  bool per_label = true;         // detections only match tracks of their label
};

struct Detection {
  Rect rect;
  int label = 0;
};

struct Track {
  uint64_t id = 0;               // 0 until confirmed
  int label = 0;
  int hits = 0;                  // matches in total
  int streak = 0;                // consecutive matches
  int misses = 0;                // frames since the last match
  int age = 0;                   // frames since the track started
  bool confirmed = false;
  Rect last;                     // the last matched detection
  BoxKalman filter;
};

class Sort {
 public:
  explicit Sort(SortParams p = {}) : p_(p) {}
  // One frame: predicts every track, matches, updates, creates and drops
  // tracks. Returns, per detection, the index into tracks() of the track
  // it belongs to now (every detection has one; new ones are tentative).
  std::vector<size_t> update(const std::vector<Detection>& detections);
  const std::vector<Track>& tracks() const { return tracks_; }
  // Frames seen since construction or reset().
  uint64_t frames() const { return frames_; }
  void reset();
  void set_params(const SortParams& p) { p_ = p; }

 private:
  SortParams p_;
  std::vector<Track> tracks_;
  uint64_t frames_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace jobflow::track
