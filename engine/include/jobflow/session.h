// jobflow/session.h — the variables all job functions share, and checkpoints.
//
// Variables live in the default session, keyed by name (OneFlow's
// "conv1-weight", "dense1-bias", optimizer state "<var>-momentum"). Two jobs
// that create a variable of the same name share it, so a predict job sees
// what a train job learned. A variable is initialized by its initializer on
// CheckPoint::init() or at the first call that needs it, unless a checkpoint
// was loaded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "jobflow/ops.h"
#include "jobflow/runtime.h"
#include "jobflow/tensor.h"

namespace jobflow {

// flow.train.CheckPoint()
class CheckPoint {
 public:
  // (Re)initializes every variable from its initializer; variables created
  // later are initialized when first used.
  void init();
  // Waits for every job call in flight, then writes OneFlow's layout:
  // dir/<var>/out (raw little-endian bytes), dir/<var>/meta, dir/snapshot_done.
  // Atomic: a crash leaves the previous checkpoint at `dir` intact.
  void save(const std::string& dir);
  // The same, with only the variables `job` uses (its body's, and for a
  // train job its optimizer state): what a pipeline element saves, so a
  // checkpoint restarts that job even when the process holds other jobs.
  void save(const std::string& dir, const CompiledJob& job);
  // Loads every variable found in `dir`. Variables already defined must match
  // in shape and dtype (error names the variable); others are kept and used
  // when a job defines them. Folders without `meta` (OneFlow 0.2/0.3) take
  // the spec the job defines, their size checked against it.
  void load(const std::string& dir);
};

namespace session {
// The variable that counts a train job's steps, as OneFlow names it:
// "System-Train-TrainStep-<job name>", int64 of shape (1,). Its value is the
// step the next call runs (the schedule's input); checkpoints hold it.
std::string train_step_variable(const std::string& job_name);
// Names of the variables defined so far, sorted.
std::vector<std::string> variable_names();
bool has_variable(const std::string& name);
// The live tensor of a variable (initialized on first access). Writing into
// it changes the model; do not resize it.
Tensor variable(const std::string& name);
// Copies `value` into variable `name` (shape and dtype must match).
void assign(const std::string& name, const Tensor& value);
// Waits for every call in flight of every job.
void sync_all();
// Forgets every variable and pending loaded value (jobs defined before keep
// theirs alive but no longer share with new jobs). For tests.
void reset();
}  // namespace session

}  // namespace jobflow
