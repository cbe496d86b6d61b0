// cpu/threads.h — how many OpenMP threads a job's call gets when the job
// does not fix its count (FunctionConfig::num_threads(0) and no
// $JOBFLOW_NUM_THREADS).
//
// Two things decide it, both measured, neither known to the user:
//   * the work per call (the plan's FLOPs): below kSmallWorkFlops a call
//     runs on one thread, because each parallel region's fork and join (and
//     the partner thread's spin) costs more than the second core gives back,
//     and in a pipeline the team's partner is preempted by the pipeline's own
//     threads (issue 15: a per-frame LeNet at 0.24x the bare engine);
//   * the cores free: the CPU time other processes used over the last
//     sampling period (/proc/stat minus this process's /proc/self/stat);
//     each started fifth of a core they use takes a thread away, so a job
//     on a shared machine does not build a team whose partner the
//     scheduler keeps away: oneDNN splits each region statically, and a
//     preempted partner stalls every region.
// The sample is taken at most every 250 ms and shared by every job.
// Inner products (cpu::LayoutMatMul) and oneDNN's Winograd convolutions in
// predict plans run a count fixed per plan instead (the job's, or
// auto_threads of the plan's work with follow_load false): oneDNN splits an
// inner product's sums between threads, and a Winograd kernel's weights
// format depends on the count, so a count that follows the load would
// change their bits from call to call (or fail to make the kernel).
#pragma once

#include <omp.h>

#include <cstdint>
#include <functional>

namespace jobflow::cpu {

// Sets the calling thread's OpenMP count for a scope (n <= 0: leaves it)
// and puts back the count it found on the way out, exceptions included.
// oneDNN fixes a primitive's formats and team for the count it is made at.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : before_(omp_get_max_threads()) {
    if (n > 0 && n != before_) omp_set_num_threads(n);
  }
  ~ScopedThreads() {
    if (omp_get_max_threads() != before_) omp_set_num_threads(before_);
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int before_;
};

inline constexpr double kSmallWorkFlops = 50e6;

// Cores other processes kept busy over the last sampling period (0 when
// /proc is not readable).
double busy_elsewhere();
// The most threads a job whose count is not fixed may use: OpenMP's
// default for a new thread ($OMP_NUM_THREADS, else the processors), read
// once. Not omp_get_max_threads() on the calling thread: that is the count
// the engine itself last set there (CompiledJob::run_here sets it per call
// on the caller's thread), so a job defined after a small job's call on the
// same thread was capped at one thread (a LeNet batch 100 in bench_pipeline:
// 4,600 images/s instead of 8,900).
int default_threads();
// Threads for one call of a job doing `flops` per call, at most `max`.
// `follow_load` false (train jobs): the work alone decides, never the other
// processes, so that training gives the same numbers run after run on the
// same machine (a thread count changes how sums are split, so their
// rounding: LeNet's weights after 20 steps differed by 0.06 between one and
// two threads, and a job reloaded from its file on a busier moment did not
// continue identically).
int auto_threads(double flops, int max, bool follow_load = true);

// OpenMP teams held by the threads that run jobs. libgomp keeps a team per
// thread that opened a parallel region, and once the process holds more
// OpenMP threads than cores it lets every waiting thread spin only briefly
// before it sleeps, so each barrier of every job pays a futex wake-up
// (measured, 2 cores: ssdlite320 at batch 1 took 8.96 ms per call instead
// of 4.17 once another job had run one call and sat idle). The engine
// therefore lets a team live on an idle thread only while no other thread
// holds one:
//   * hold_team(): the calling thread starts a call on more than one
//     thread (it holds a team from now on, and is the newest holder).
//     Every other holder is asked to free its team when idle, so only the
//     newest holder is never asked;
//     `wake` is how this thread is woken to do so when asked while asleep
//     (a job's worker; empty: the thread checks when it next goes idle).
//     Never call it with a lock that another holder's `wake` takes;
//   * team_release_asked(): was the calling thread asked to free its team
//     (it holds one and another thread started one since)? An atomic read
//     (a worker's wait predicate);
//   * team_call_ended(): the calling thread's call ended (its idle time
//     starts);
//   * team_release_due_in_us(): -1 when not asked, else how long until the
//     thread should free its team: an asked thread keeps it until
//     kTeamIdleUs after the later of the ask and the end of its last call
//     (a call also makes it the newest holder again), so that two jobs called in turn keep
//     their teams as before: freeing and rebuilding a team at every turn
//     (two threads woken mid-call, a thread started and joined) cost more
//     than libgomp's throttled waits (LeNet at batch 8 called alternately
//     from two jobs: 4-5 ms per pair of calls against 1.9-2.3;
//     mobilenet_v2 and ssdlite320 at batch 1: 15-20 ms against 13.7-14.2),
//     while a job that sits idle frees its team soon (one that ran a
//     single call had halved the other's speed);
//   * forget_team(): the calling thread freed its team
//     (jobflow::release_calling_thread calls it). A thread that exits is
//     forgotten with it.
inline constexpr int64_t kTeamIdleUs = 50000;
void hold_team(const std::function<void()>& wake);
bool team_release_asked();
void team_call_ended();
int64_t team_release_due_in_us();
void forget_team();

}  // namespace jobflow::cpu
