// The variable store behind session.h (internal).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "jobflow/ops.h"
#include "jobflow/tensor.h"

namespace jobflow::internal {

struct VariableEntry {
  std::string name;
  TensorSpec spec;
  Initializer init;
  // Trainable in some job that uses it (CheckPoint.load requires a value for
  // those); whether a job trains it is its VariableOp's flag. Under the
  // store's lock.
  bool trainable = true;
  std::atomic<bool> initialized{false};
  Tensor value;  // stable storage for the lifetime of the entry
  // Bumped by every change of `value` the engine makes: initialization,
  // load, assign, and each call of a job whose ops update it (train steps,
  // moving statistics). Plans keep derived forms of weights (reordered to a
  // blocked layout, batch norm folded in, bf16) and rebuild them when it
  // changes. Writes through the tensor session::variable() returns are not
  // seen: use session::assign.
  std::atomic<uint64_t> version{0};
  // Jobs on different threads share variables (a train and an eval job fed
  // from one pipeline): a step holds every variable it uses for its whole
  // length, exclusively when it writes them (a train step), shared when it
  // only reads them; so do checkpoint saves (shared) and loads and assigns
  // (exclusive). See HeldVariables.
  std::shared_mutex use;
};

// Holds a set of variables' `use` locks for a scope: taken in address
// order (any two holders agree on it, so none waits for the other in a
// cycle), released in reverse. Never take the store's lock while holding
// these (the store takes them under its lock).
class HeldVariables {
 public:
  HeldVariables(std::vector<VariableEntry*> entries, bool exclusive);
  // `ordered` (from in_order(), outliving this) as it is: no copy, for a step.
  HeldVariables(const std::vector<VariableEntry*>* ordered, bool exclusive);
  ~HeldVariables();
  HeldVariables(const HeldVariables&) = delete;
  HeldVariables& operator=(const HeldVariables&) = delete;
  // The entries sorted and without duplicates, as the constructor takes them.
  static std::vector<VariableEntry*> in_order(std::vector<VariableEntry*> entries);

 private:
  std::vector<VariableEntry*> own_;
  const std::vector<VariableEntry*>* held_;
  bool exclusive_;
};

class VariableStore {
 public:
  static VariableStore& get();
  // Creates or finds variable `name`; errors if it exists with another spec.
  std::shared_ptr<VariableEntry> define(const std::string& name, const TensorSpec& spec, const Initializer& init,
                                        bool trainable);
  std::shared_ptr<VariableEntry> find(const std::string& name);
  // Initializes the entry from its initializer if nothing set it yet.
  void ensure_initialized(VariableEntry& e);
  void init_all();
  // Every variable (initializing those not yet set); their entries in *entries.
  std::map<std::string, Tensor> snapshot(std::vector<VariableEntry*>* entries = nullptr);
  // Values read from checkpoint `from`; `untyped` are the raw bytes of
  // variables saved without `meta` (typed when a job defines them).
  void load(std::map<std::string, Tensor> values, const std::string& from,
            std::map<std::string, Tensor> untyped = {});
  std::vector<std::string> names();
  void reset();
  // Forgets the variables whose names start with `scope` (not empty): a
  // job's own (JobDefinition::variable_scope), when the job is destroyed.
  void forget_scope(const std::string& scope);
  // Jobs register a way to wait for their calls in flight; the function
  // returns false once its job is gone, and is then dropped. `owner` is the
  // job: the entries of jobs that are gone are dropped on the next add too,
  // so a process that compiles and destroys jobs without ever syncing them
  // all does not keep one entry (and the job's control block) per job.
  int add_syncer(std::function<bool()> f, std::weak_ptr<const void> owner);
  void remove_syncer(int id);
  void sync_all();
  uint64_t seed() const { return seed_; }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<VariableEntry>> vars_;
  std::map<std::string, Tensor> pending_;  // loaded before the job defined them
  struct Untyped {
    Tensor bytes;      // (nbytes,) UInt8: `out` of a folder without `meta`
    std::string from;  // the checkpoint, for errors
  };
  std::map<std::string, Untyped> pending_untyped_;
  struct Syncer {
    std::function<bool()> sync;
    std::weak_ptr<const void> owner;
  };
  std::map<int, Syncer> syncers_;
  int next_syncer_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace jobflow::internal
