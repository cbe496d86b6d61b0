// ThreadSanitizer annotations for GLib's and GStreamer's synchronization,
// linked into the element test programs of a -Db_sanitize=thread build
// (tests/elements/meson.build; docs/testing.md, "GLib and GStreamer under
// ThreadSanitizer").
//
// Debian's GLib and GStreamer are not instrumented, and on Linux GLib
// implements GMutex and GCond with futexes and atomics of its own (not
// pthread), so TSan sees none of the locking GStreamer does: every buffer
// handed from one thread to another looks like a race. (GRecMutex and
// GRWLock are pthread objects, which TSan's interceptors already see, so
// the pad stream locks need nothing here.) GLib has no build option that
// swaps the futexes for pthread on Linux, and rebuilding GLib and GStreamer
// with -fsanitize=thread is beyond CI's budget; instead this file defines
// the GLib/GStreamer functions whose synchronization matters, with the
// same names: the executable comes first in the dynamic linker's lookup,
// so the calls from libgstreamer, libgstbase, libgstapp, libgstcheck (and
// from our own code) land here, tell TSan what the call means, and run the
// real function (dlsym(RTLD_NEXT)). Calls inside one library (GLib calling
// its own g_mutex_lock; libgstreamer calling its own gst_mini_object_unref)
// do not go through the dynamic linker and are not seen; what those guard
// is handed over to our code through the functions below.
//
//   GMutex        lock / trylock / unlock / init / clear: a mutex to TSan
//                 (happens-before and lock-order inversions).
//   GCond         wait / wait_until: the mutex is released while waiting.
//   GAsyncQueue   push releases, pop acquires (GstHarness's buffer and
//                 event queues); lock / unlock: a mutex.
//   g_once        g_once_init_leave releases what g_once_init_enter
//                 (the function, or the header's inline atomic load)
//                 acquires (GType registration, once-only statics).
//   GThreadPool   push releases the task's data, the worker acquires it
//                 before running the pool's function (GstTask's threads).
//   ref counts    gst_mini_object_unref, g_object_unref,
//                 g_atomic_rc_box_release_full: each unref releases and
//                 acquires the object (a sample's buffer, a buffer's
//                 memories and their parents with it), so the last one,
//                 which frees it, happens after every earlier owner's
//                 accesses (what the atomic decrement orders in the
//                 uninstrumented library);
//                 g_slice_free1 and g_free acquire the block they free,
//                 for last unrefs made inside libgstreamer.
#include <dlfcn.h>
#include <gst/gst.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

namespace {

template <class Fn>
Fn real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    std::fprintf(stderr, "tsan_glib: %s not found after the test program (dlsym RTLD_NEXT)\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// The real function, looked up once (a function-local static: thread-safe).
#define REAL(name) static const auto real_##name = real<decltype(&::name)>(#name)

void mutex_unlocked(void* m) {
  __tsan_mutex_pre_unlock(m, 0);
  __tsan_mutex_post_unlock(m, 0);
}

void mutex_locked(void* m) {
  __tsan_mutex_pre_lock(m, 0);
  __tsan_mutex_post_lock(m, 0, 0);
}

// An unref: releases this owner's accesses to the object and acquires the
// earlier owners', so the last unref (the one that frees) follows them all.
void unref_sync(const void* object) {
  __tsan_release(const_cast<void*>(object));
  __tsan_acquire(const_cast<void*>(object));
}

// The same for what the object holds and frees with itself: a sample's
// buffer, a buffer's memories and the memories they share (a sub-buffer's
// memory keeps its parent's alive). Their own unrefs then happen inside
// libgstreamer, not seen here, and the last owner may be another thread
// than the reader: jobsink's caller reads a result and drops the sample,
// jobfunction's task frees the memory later; jobunbatch's frames share
// the batch's memory, which jobbatch's task frees. Everything is read
// before the object is released (a read after it would race with the
// free on the other thread).
void unref_sync_tree(GstMiniObject* o) {
  const void* held[64];  // the object, a buffer, its memories (16 at most) and their parents
  size_t n = 0;
  held[n++] = o;
  GstBuffer* b = nullptr;
  if (GST_IS_SAMPLE(o)) {
    b = gst_sample_get_buffer(GST_SAMPLE_CAST(o));
    if (b) held[n++] = b;
  } else if (GST_IS_BUFFER(o)) {
    b = GST_BUFFER_CAST(o);
  }
  if (b) {
    const guint memories = gst_buffer_n_memory(b);
    for (guint i = 0; i < memories; ++i) {
      for (GstMemory* m = gst_buffer_peek_memory(b, i); m && n < G_N_ELEMENTS(held); m = m->parent) held[n++] = m;
    }
  }
  for (size_t i = 0; i < n; ++i) unref_sync(held[i]);
}

// GLib's thread pools hand a task to a worker through a GAsyncQueue inside
// GLib: g_thread_pool_new's function is wrapped so that the worker acquires
// what the pusher released (GstTask's streaming threads come from one).
struct PoolFunc {
  GFunc func;
  gpointer user_data;
};

void pool_func(gpointer data, gpointer wrapped) {
  __tsan_acquire(data);
  const auto* w = static_cast<const PoolFunc*>(wrapped);
  w->func(data, w->user_data);
}

}  // namespace

extern "C" {

void g_mutex_init(GMutex* m) {
  REAL(g_mutex_init);
  real_g_mutex_init(m);
  __tsan_mutex_create(m, 0);
}

void g_mutex_clear(GMutex* m) {
  REAL(g_mutex_clear);
  __tsan_mutex_destroy(m, 0);
  real_g_mutex_clear(m);
}

void g_mutex_lock(GMutex* m) {
  REAL(g_mutex_lock);
  __tsan_mutex_pre_lock(m, 0);
  real_g_mutex_lock(m);
  __tsan_mutex_post_lock(m, 0, 0);
}

gboolean g_mutex_trylock(GMutex* m) {
  REAL(g_mutex_trylock);
  __tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
  const gboolean ok = real_g_mutex_trylock(m);
  __tsan_mutex_post_lock(m, ok ? __tsan_mutex_try_lock : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed, 0);
  return ok;
}

void g_mutex_unlock(GMutex* m) {
  REAL(g_mutex_unlock);
  __tsan_mutex_pre_unlock(m, 0);
  real_g_mutex_unlock(m);
  __tsan_mutex_post_unlock(m, 0);
}

void g_cond_wait(GCond* c, GMutex* m) {
  REAL(g_cond_wait);
  mutex_unlocked(m);
  real_g_cond_wait(c, m);
  mutex_locked(m);
}

gboolean g_cond_wait_until(GCond* c, GMutex* m, gint64 end_time) {
  REAL(g_cond_wait_until);
  mutex_unlocked(m);
  const gboolean signalled = real_g_cond_wait_until(c, m, end_time);
  mutex_locked(m);
  return signalled;
}

void g_async_queue_lock(GAsyncQueue* q) {
  REAL(g_async_queue_lock);
  real_g_async_queue_lock(q);
  mutex_locked(q);
}

void g_async_queue_unlock(GAsyncQueue* q) {
  REAL(g_async_queue_unlock);
  mutex_unlocked(q);
  real_g_async_queue_unlock(q);
}

void g_async_queue_push(GAsyncQueue* q, gpointer data) {
  REAL(g_async_queue_push);
  __tsan_release(q);
  real_g_async_queue_push(q, data);
}

gpointer g_async_queue_pop(GAsyncQueue* q) {
  REAL(g_async_queue_pop);
  gpointer data = real_g_async_queue_pop(q);
  __tsan_acquire(q);
  return data;
}

gpointer g_async_queue_try_pop(GAsyncQueue* q) {
  REAL(g_async_queue_try_pop);
  gpointer data = real_g_async_queue_try_pop(q);
  __tsan_acquire(q);
  return data;
}

gpointer g_async_queue_timeout_pop(GAsyncQueue* q, guint64 timeout) {
  REAL(g_async_queue_timeout_pop);
  gpointer data = real_g_async_queue_timeout_pop(q, timeout);
  __tsan_acquire(q);
  return data;
}

gpointer g_async_queue_try_pop_unlocked(GAsyncQueue* q) {
  REAL(g_async_queue_try_pop_unlocked);
  gpointer data = real_g_async_queue_try_pop_unlocked(q);
  __tsan_acquire(q);
  return data;
}

gboolean(g_once_init_enter)(volatile void* location) {
  REAL(g_once_init_enter);
  const gboolean first = real_g_once_init_enter(location);
  __tsan_acquire(const_cast<void*>(location));
  return first;
}

void(g_once_init_leave)(volatile void* location, gsize result) {
  REAL(g_once_init_leave);
  __tsan_release(const_cast<void*>(location));
  real_g_once_init_leave(location, result);
}

GThreadPool* g_thread_pool_new(GFunc func, gpointer user_data, gint max_threads, gboolean exclusive, GError** error) {
  REAL(g_thread_pool_new);
  auto* w = new PoolFunc{func, user_data};  // as long as the pool: a few per process, never freed
  GThreadPool* pool = real_g_thread_pool_new(pool_func, w, max_threads, exclusive, error);
  if (!pool) delete w;
  return pool;
}

gboolean g_thread_pool_push(GThreadPool* pool, gpointer data, GError** error) {
  REAL(g_thread_pool_push);
  __tsan_release(data);
  return real_g_thread_pool_push(pool, data, error);
}

void gst_mini_object_unref(GstMiniObject* o) {
  REAL(gst_mini_object_unref);
  unref_sync_tree(o);
  real_gst_mini_object_unref(o);
}

void g_object_unref(gpointer o) {
  REAL(g_object_unref);
  unref_sync(o);
  real_g_object_unref(o);
}

// The frees of GstMiniObjects and GObjects (g_slice_free1 in GLib 2.74,
// g_free for some): a last unref inside libgstreamer (a bus message the
// bin drops, a buffer's memory) is not seen above; acquiring at the free
// orders it after every unref that released the object.
void g_slice_free1(gsize size, gpointer mem) {
  REAL(g_slice_free1);
  if (mem) __tsan_acquire(mem);
  real_g_slice_free1(size, mem);
}

void g_free(gpointer mem) {
  REAL(g_free);
  if (mem) __tsan_acquire(mem);
  real_g_free(mem);
}

void g_atomic_rc_box_release_full(gpointer mem_block, GDestroyNotify clear_func) {
  REAL(g_atomic_rc_box_release_full);
  unref_sync(mem_block);
  real_g_atomic_rc_box_release_full(mem_block, clear_func);
}

}  // extern "C"
