// The variable store shared by all jobs, and CheckPoint.
#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

#include "compiler.h"
#include "jobflow/checkpoint_io.h"
#include "jobflow/session.h"
#include "session_internal.h"
#include "state_ops.h"

namespace jobflow {
namespace internal {

namespace {
// The bytes of a variable saved without `meta` as the tensor the job defines.
Tensor typed_from_bytes(const std::string& name, const Tensor& bytes, const TensorSpec& spec, const std::string& from) {
  Tensor t(spec.shape, spec.dtype);
  if (static_cast<size_t>(bytes.nbytes()) != static_cast<size_t>(t.nbytes()))
    throw Error("[CheckPoint.load] variable '" + name + "' in " + from + " has no meta file and " +
                std::to_string(bytes.nbytes()) + " bytes, but the job defines it as " + spec_str(spec) + " (" +
                std::to_string(t.nbytes()) + " bytes)");
  std::memcpy(t.raw(), bytes.raw(), t.nbytes());
  return t;
}
}  // namespace

VariableStore& VariableStore::get() {
  static VariableStore s;
  return s;
}

std::shared_ptr<VariableEntry> VariableStore::define(const std::string& name, const TensorSpec& spec,
                                                     const Initializer& init, bool trainable) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = vars_.find(name);
  if (it != vars_.end()) {
    if (it->second->spec != spec)
      throw Error("[get_variable] variable '" + name + "' already exists as " + spec_str(it->second->spec) +
                  ", asked for " + spec_str(spec));
    // Trainable in any job that uses it (each job's VariableOp decides
    // whether that job trains it).
    if (trainable) it->second->trainable = true;
    return it->second;
  }
  auto e = std::make_shared<VariableEntry>();
  e->name = name;
  e->spec = spec;
  e->init = init;
  e->trainable = trainable;
  e->value = Tensor(spec.shape, spec.dtype);
  auto p = pending_.find(name);
  if (p != pending_.end()) {
    if (p->second.shape() != spec.shape || p->second.dtype() != spec.dtype)
      throw Error("[CheckPoint.load] variable '" + name + "' in the checkpoint is " +
                  spec_str({p->second.shape(), p->second.dtype()}) + " but the job defines it as " + spec_str(spec));
    std::memcpy(e->value.raw(), p->second.raw(), e->value.nbytes());
    e->initialized = true;
    pending_.erase(p);
  } else if (auto u = pending_untyped_.find(name); u != pending_untyped_.end()) {
    const Tensor t = typed_from_bytes(name, u->second.bytes, spec, u->second.from);
    std::memcpy(e->value.raw(), t.raw(), e->value.nbytes());
    e->initialized = true;
    pending_untyped_.erase(u);
  }
  vars_[name] = e;
  return e;
}

std::vector<VariableEntry*> HeldVariables::in_order(std::vector<VariableEntry*> entries) {
  std::sort(entries.begin(), entries.end(), std::less<VariableEntry*>());
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  return entries;
}

HeldVariables::HeldVariables(std::vector<VariableEntry*> entries, bool exclusive)
    : own_(in_order(std::move(entries))), held_(&own_), exclusive_(exclusive) {
  for (VariableEntry* e : *held_) exclusive_ ? e->use.lock() : e->use.lock_shared();
}

HeldVariables::HeldVariables(const std::vector<VariableEntry*>* ordered, bool exclusive)
    : held_(ordered), exclusive_(exclusive) {
  for (VariableEntry* e : *held_) exclusive_ ? e->use.lock() : e->use.lock_shared();
}

HeldVariables::~HeldVariables() {
  for (auto it = held_->rbegin(); it != held_->rend(); ++it)
    exclusive_ ? (*it)->use.unlock() : (*it)->use.unlock_shared();
}

std::shared_ptr<VariableEntry> VariableStore::find(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : it->second;
}

static uint64_t name_seed(const std::string& name, uint64_t seed) {
  return std::hash<std::string>{}(name) ^ (seed * 0x9E3779B97F4A7C15ull);
}

void VariableStore::ensure_initialized(VariableEntry& e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (e.initialized) return;
  HeldVariables held({&e}, true);
  e.init.fill(e.value, name_seed(e.name, seed_));
  e.version.fetch_add(1, std::memory_order_acq_rel);
  e.initialized = true;
}

void VariableStore::init_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [n, e] : vars_) {
    HeldVariables held({e.get()}, true);
    e->init.fill(e->value, name_seed(n, seed_));
    e->version.fetch_add(1, std::memory_order_acq_rel);
    e->initialized = true;
  }
  pending_.clear();
  pending_untyped_.clear();
}

std::map<std::string, Tensor> VariableStore::snapshot(std::vector<VariableEntry*>* entries) {
  std::vector<std::shared_ptr<VariableEntry>> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [n, e] : vars_) all.push_back(e);
  }
  std::map<std::string, Tensor> out;
  for (auto& e : all) {
    ensure_initialized(*e);
    out[e->name] = e->value;
    if (entries) entries->push_back(e.get());
  }
  return out;
}

void VariableStore::load(std::map<std::string, Tensor> values, const std::string& from,
                         std::map<std::string, Tensor> untyped) {
  std::lock_guard<std::mutex> lk(mu_);
  // Untyped values of variables defined by now are typed (size checked) here.
  for (auto it = untyped.begin(); it != untyped.end();) {
    auto v = vars_.find(it->first);
    if (v == vars_.end()) {
      ++it;
      continue;
    }
    values[it->first] = typed_from_bytes(it->first, it->second, v->second->spec, from);
    it = untyped.erase(it);
  }
  // Validate everything first so a bad checkpoint changes nothing.
  std::vector<std::string> missing;
  for (auto& [n, e] : vars_) {
    auto it = values.find(n);
    if (it == values.end()) {
      if (e->trainable) missing.push_back(n);
      continue;
    }
    if (it->second.shape() != e->spec.shape || it->second.dtype() != e->spec.dtype)
      throw Error("[CheckPoint.load] variable '" + n + "' in " + from + " is " +
                  spec_str({it->second.shape(), it->second.dtype()}) + " but the job defines it as " +
                  spec_str(e->spec));
  }
  if (!missing.empty()) {
    std::string list;
    for (auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw Error("[CheckPoint.load] " + from + " has no value for variable(s): " + list);
  }
  for (auto& [n, v] : untyped) {
    pending_.erase(n);
    pending_untyped_[n] = {v, from};
  }
  for (auto& [n, v] : values) {
    auto it = vars_.find(n);
    if (it == vars_.end()) {
      pending_untyped_.erase(n);
      pending_[n] = v;
      continue;
    }
    HeldVariables held({it->second.get()}, true);
    std::memcpy(it->second->value.raw(), v.raw(), v.nbytes());
    it->second->version.fetch_add(1, std::memory_order_acq_rel);
    it->second->initialized = true;
  }
}

std::vector<std::string> VariableStore::names() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> r;
  for (auto& [n, e] : vars_) r.push_back(n);
  return r;
}

void VariableStore::forget_scope(const std::string& scope) {
  if (scope.empty()) return;
  std::lock_guard<std::mutex> lk(mu_);
  auto mine = [&](const auto& kv) { return kv.first.rfind(scope, 0) == 0; };
  std::erase_if(vars_, mine);
  std::erase_if(pending_, mine);
  std::erase_if(pending_untyped_, mine);
}

void VariableStore::reset() {
  std::lock_guard<std::mutex> lk(mu_);
  vars_.clear();
  pending_.clear();
  pending_untyped_.clear();
}

int VariableStore::add_syncer(std::function<bool()> f, std::weak_ptr<const void> owner) {
  std::lock_guard<std::mutex> lk(mu_);
  std::erase_if(syncers_, [](const auto& kv) { return kv.second.owner.expired(); });
  syncers_[next_syncer_] = {std::move(f), std::move(owner)};
  return next_syncer_++;
}
void VariableStore::remove_syncer(int id) {
  std::lock_guard<std::mutex> lk(mu_);
  syncers_.erase(id);
}
void VariableStore::sync_all() {
  std::vector<std::pair<int, std::function<bool()>>> fs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [i, f] : syncers_) fs.emplace_back(i, f.sync);
  }
  std::vector<int> gone;
  for (auto& [i, f] : fs)  // never call out while holding the lock
    if (!f()) gone.push_back(i);
  std::lock_guard<std::mutex> lk(mu_);
  for (int i : gone) syncers_.erase(i);
}

}  // namespace internal

using internal::VariableStore;

void CheckPoint::init() {
  VariableStore::get().sync_all();
  VariableStore::get().init_all();
}

void CheckPoint::save(const std::string& dir) {
  VariableStore::get().sync_all();
  std::vector<internal::VariableEntry*> entries;
  const std::map<std::string, Tensor> all = VariableStore::get().snapshot(&entries);
  internal::HeldVariables held(entries, false);  // whole steps, should another thread keep calling a job
  checkpoint_io::save(dir, all);
}

void CheckPoint::save(const std::string& dir, const CompiledJob& job) {
  VariableStore::get().sync_all();
  std::set<std::string> used;
  if (const auto& g = job.definition().graph)
    for (const Node& n : g->nodes)
      if (auto* v = dynamic_cast<const internal::VariableOp*>(n.op.get())) used.insert(v->entry()->name);
  if (!job_plan_options(job).step_variable.empty()) used.insert(job_plan_options(job).step_variable);
  if (used.empty())
    throw Error("[CheckPoint.save] job '" + job.signature().job_name + "' has no variables to save");
  std::vector<internal::VariableEntry*> entries;
  std::map<std::string, Tensor> all = VariableStore::get().snapshot(&entries), mine;
  for (const std::string& name : used) {
    auto it = all.find(name);
    if (it != all.end()) mine.emplace(job.definition().saved_name(name), it->second);
  }
  internal::HeldVariables held(entries, false);
  checkpoint_io::save(dir, mine);
}

void CheckPoint::load(const std::string& dir) {
  VariableStore& store = VariableStore::get();
  store.sync_all();
  // Folders without `meta` (OneFlow 0.2/0.3) are read with the spec the jobs
  // define; those no job defines yet are typed when one does.
  checkpoint_io::Contents c =
      checkpoint_io::load_any(dir, [&store](const std::string& name) -> std::optional<std::pair<Shape, DType>> {
        auto e = store.find(name);
        if (!e) return std::nullopt;
        return std::make_pair(e->spec.shape, e->spec.dtype);
      });
  store.load(std::move(c.typed), dir, std::move(c.untyped));
}

namespace session {
std::string train_step_variable(const std::string& job_name) { return "System-Train-TrainStep-" + job_name; }
std::vector<std::string> variable_names() { return VariableStore::get().names(); }
bool has_variable(const std::string& name) { return VariableStore::get().find(name) != nullptr; }
Tensor variable(const std::string& name) {
  auto e = VariableStore::get().find(name);
  if (!e) throw Error("[session::variable] no variable named '" + name + "'");
  VariableStore::get().ensure_initialized(*e);
  return e->value;
}
void assign(const std::string& name, const Tensor& value) {
  auto e = VariableStore::get().find(name);
  if (!e) throw Error("[session::assign] no variable named '" + name + "'");
  if (value.shape() != e->spec.shape || value.dtype() != e->spec.dtype)
    throw Error("[session::assign] variable '" + name + "' is " + spec_str(e->spec) + ", value is " +
                spec_str({value.shape(), value.dtype()}));
  VariableStore::get().sync_all();
  internal::HeldVariables held({e.get()}, true);  // a step of another thread's job may be running
  std::memcpy(e->value.raw(), value.raw(), value.nbytes());
  e->version.fetch_add(1, std::memory_order_acq_rel);
  e->initialized = true;
}
void sync_all() { VariableStore::get().sync_all(); }
void reset() {
  VariableStore::get().sync_all();
  VariableStore::get().reset();
}
}  // namespace session

}  // namespace jobflow
