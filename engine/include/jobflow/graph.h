// jobflow/graph.h — the graph IR that a job function's body builds.
//
// While a job function's body runs (at definition time, once), every op call
// appends a Node to the current Graph and returns Blobs: placeholders with a
// shape and dtype but no data (the seeds' BlobDef). The compiler later turns
// the Graph into a Plan. Nothing here touches data.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jobflow/tensor.h"

namespace jobflow {

class Primitive;
class Graph;

struct TensorSpec {
  Shape shape;
  DType dtype = DType::Float32;
  bool operator==(const TensorSpec&) const = default;
};
std::string spec_str(const TensorSpec& s);  // "(100, 10) float32"

// Where an op runs: device tag ("cpu" or "gpu") and OneFlow's machine:device
// range ("0:0").
struct Placement {
  std::string device = "cpu";
  std::string ids = "0:0";
};

struct BlobDesc {
  TensorSpec spec;
  int producer = -1;  // node index
  int out_index = 0;
  std::string name;   // "<node name>/out<i>"
};

struct Node {
  std::string name;
  std::shared_ptr<Primitive> op;
  std::vector<int> inputs;   // blob ids
  std::vector<int> outputs;  // blob ids
  Placement placement;
};

// A symbolic tensor of the graph under construction.
class Blob {
 public:
  Blob() = default;
  Blob(Graph* g, int id) : g_(g), id_(id) {}
  bool defined() const { return g_ != nullptr; }
  int id() const { return id_; }
  Graph* graph() const { return g_; }
  // By value: the graph's storage moves as nodes are added.
  Shape shape() const;
  DType dtype() const;
  TensorSpec spec() const;
  int ndim() const;
  std::string name() const;

 private:
  Graph* g_ = nullptr;
  int id_ = -1;
};

class Graph {
 public:
  std::vector<Node> nodes;
  std::vector<BlobDesc> blobs;

  // Appends a node: runs the primitive's shape/dtype inference (which throws
  // an Error naming the op and the shapes), creates the output blobs and
  // records the current placement scope. `name` empty = auto-generated.
  std::vector<Blob> add(std::shared_ptr<Primitive> op, const std::vector<Blob>& inputs, std::string name = "");
  std::string unique_name(const std::string& prefix);
  Blob blob(int id) { return Blob(this, id); }
  // Blob ids consumed by each node, reverse index (filled on demand).
  std::vector<std::vector<int>> consumers() const;

 private:
  std::vector<std::pair<std::string, int>> name_counts_;
};

// The graph being built by the job function body on this thread (null when
// no body is running). Ops called outside a body throw.
Graph* current_graph();
Graph& require_graph(const char* op);

namespace detail {
struct GraphScope {  // sets current_graph() for the duration of a body
  explicit GraphScope(Graph* g);
  ~GraphScope();
  Graph* prev;
};
const Placement& current_placement();
void push_placement(Placement p);
void pop_placement();
}  // namespace detail

namespace scope {
// RAII form of OneFlow's `with flow.scope.placement("gpu", "0:0"):`
//   { auto s = flow::scope::placement("gpu", "0:0"); ...ops... }
class placement {
 public:
  placement(std::string device, std::string ids = "0:0");
  // Block form: flow::scope::placement("cpu", "0:0", [&] { ... });
  placement(std::string device, std::string ids, const std::function<void()>& body);
  ~placement();
  placement(const placement&) = delete;
  placement& operator=(const placement&) = delete;

 private:
  bool active_ = false;
};
}  // namespace scope

}  // namespace jobflow
