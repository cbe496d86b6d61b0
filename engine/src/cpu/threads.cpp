// cpu/threads.cpp — automatic thread counts (see threads.h).
#include "cpu/threads.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <omp.h>
#include <mutex>
#include <vector>

namespace jobflow::cpu {
namespace {

// Busy and total jiffies of the machine, and this process's busy jiffies.
bool sample(double* busy, double* total, double* self) {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return false;
  unsigned long long v[10] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                            &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
  std::fclose(f);
  if (n < 4) return false;
  // user nice system idle iowait irq softirq steal (guest is within user)
  const double idle = static_cast<double>(v[3] + v[4]);
  double all = 0;
  for (int i = 0; i < std::min(n, 8); ++i) all += static_cast<double>(v[i]);
  *busy = all - idle;
  *total = all;
  f = std::fopen("/proc/self/stat", "r");
  if (!f) return false;
  char buf[1024];
  const size_t len = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[len] = 0;
  // Fields after the command name (which may hold spaces): skip to ") ".
  const char* p = nullptr;
  for (size_t i = len; i-- > 0;)
    if (buf[i] == ')') {
      p = buf + i + 2;
      break;
    }
  if (!p) return false;
  unsigned long long utime = 0, stime = 0;
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  if (std::sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2) return false;
  *self = static_cast<double>(utime + stime);
  return true;
}

std::mutex g_mu;
std::chrono::steady_clock::time_point g_at;
double g_busy = 0, g_total = 0, g_self = 0;
std::atomic<double> g_elsewhere{0.0};

}  // namespace

double busy_elsewhere() {
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(g_mu, std::try_to_lock);
  if (!lk.owns_lock() || now - g_at < std::chrono::milliseconds(250)) return g_elsewhere.load();
  double busy, total, self;
  if (!sample(&busy, &total, &self)) return 0.0;
  if (g_total > 0 && total > g_total) {
    static const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    const double others = (busy - g_busy) - (self - g_self);  // jiffies of every CPU
    g_elsewhere.store(std::max(0.0, others / (total - g_total) * static_cast<double>(cores)));
  }
  g_at = now;
  g_busy = busy, g_total = total, g_self = self;
  return g_elsewhere.load();
}

int default_threads() {
  static const int n = [] {
    int t = 0;
    if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) t = std::atoi(env);  // "4" or "4,2": the first
    if (t <= 0) t = omp_get_num_procs();
    return std::clamp(t, 1, std::max(1, omp_get_thread_limit()));
  }();
  return n;
}

namespace {

// One per thread that holds a team. The list and every `asked` change are
// guarded by team_mu(); `asked` is atomic so that a worker's wait
// predicate reads it under its own lock. Leaked: threads may end after
// static destruction.
struct TeamHolder {
  std::function<void()> wake;
  std::atomic<bool> asked{false};
  std::atomic<int64_t> asked_at_us{0};  // steady clock
};
int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
std::mutex& team_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<TeamHolder*>& team_holders() {
  static auto* v = new std::vector<TeamHolder*>;
  return *v;
}
void drop_holder_locked(TeamHolder* h) {
  auto& v = team_holders();
  v.erase(std::remove(v.begin(), v.end(), h), v.end());
}
struct ThreadTeam {
  TeamHolder holder;
  bool held = false;
  int64_t last_call_end_us = 0;  // this thread's, steady clock
  ~ThreadTeam() {
    if (!held) return;
    std::lock_guard<std::mutex> lk(team_mu());
    drop_holder_locked(&holder);
  }
};
thread_local ThreadTeam t_team;

}  // namespace

void hold_team(const std::function<void()>& wake) {
#ifndef _LIBGOMP_OMP_LOCK_DEFINED
  return;  // only libgomp's teams can be freed (jobflow::release_calling_thread)
#endif
  if (t_team.held && !t_team.holder.asked.load()) return;  // the newest holder already
  std::lock_guard<std::mutex> lk(team_mu());
  // New, or asked to go yet computing again: the newest holder now, and
  // every other one is asked (an asked thread frees its team only after
  // kTeamIdleUs without a call, so two jobs called in turn keep theirs).
  if (!t_team.held) team_holders().push_back(&t_team.holder);
  if (wake || !t_team.held) t_team.holder.wake = wake;  // a worker's run_here of another job keeps its wake
  t_team.holder.asked.store(false);
  t_team.held = true;
  const int64_t now = now_us();
  for (TeamHolder* other : team_holders()) {
    if (other == &t_team.holder || other->asked.load()) continue;
    other->asked_at_us.store(now);
    other->asked.store(true);
    if (other->wake) other->wake();
  }
}

bool team_release_asked() { return t_team.held && t_team.holder.asked.load(); }

void team_call_ended() {
  if (t_team.held) t_team.last_call_end_us = now_us();
}

int64_t team_release_due_in_us() {
  if (!team_release_asked()) return -1;
  const int64_t since = std::max(t_team.holder.asked_at_us.load(), t_team.last_call_end_us);
  return std::max<int64_t>(0, since + kTeamIdleUs - now_us());
}

void forget_team() {
  if (!t_team.held) return;
  std::lock_guard<std::mutex> lk(team_mu());
  drop_holder_locked(&t_team.holder);
  t_team.held = false;
  t_team.holder.asked.store(false);
  t_team.holder.wake = nullptr;
}

int auto_threads(double flops, int max, bool follow_load) {
  if (max <= 1 || flops < kSmallWorkFlops) return 1;
  if (!follow_load) return max;
  // A core counts as taken as soon as others use more than a fifth of one:
  // oneDNN splits each region statically between the team's threads, so
  // one preempted partner stalls the whole region (measured under load:
  // ssdlite320 batch 1 at 3 images/s on two threads, 33 on one).
  const double others = busy_elsewhere();
  const int taken = static_cast<int>(std::ceil(std::max(0.0, others - 0.2)));
  return std::clamp(max - taken, 1, max);
}

}  // namespace jobflow::cpu
