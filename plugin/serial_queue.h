/* SerialQueue: the bounded queue between an element's sink pad and a task
 * on its src pad, for elements that decouple upstream from their work the
 * way GStreamer's `queue` does (jobfunction, jobbatch).
 *
 *   sink side (upstream's streaming thread)   task (the element's own thread)
 *   push(buffer or serialized event) ------>  Handler::item(item), in order
 *   blocks while `limit` buffers wait         push_event() for events
 *
 * Buffers and serialized events keep their order. The element's code (the
 * Handler) always runs without the queue's lock held, as appsink calls its
 * callbacks; the lock guards only the queue's own state. Flushing follows
 * `queue`: FLUSH_START is forwarded and stops the task; FLUSH_STOP drops
 * what waits, except sticky events (stream-start, caps, tags), which stay
 * on the src pad for the next buffer, and restarts the task. EOS travels
 * through the queue, so it leaves after every result before it. When the
 * Handler returns anything but GST_FLOW_OK, the task pauses, push() returns
 * that flow to upstream, and errors (and NOT_LINKED) are posted with an EOS
 * pushed downstream, as GStreamer's own tasks do.
 *
 * Adding an element with a queue: give it a SerialQueue (in its private
 * struct), call push() from chain and for serialized events, flush_start()
 * / flush_stop() for the flush events, activate() from the src pad's
 * activate-mode function, and handle items in the Handler. */
#pragma once

#include <gst/gst.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace jobflow::gst {

/* What an element attaches to an item (jobfunction: the call; jobbatch: the
 * configuration that comes with new caps). Elements derive their own. */
struct ItemData {
  virtual ~ItemData() = default;
};

class SerialQueue {
 public:
  /* A buffer or a serialized event (one of the two), with the element's
   * data for it; or the data alone, a note for the task that keeps its
   * place among them (jobfunction's output format; a flush drops it). An
   * Item owns its references (move-only; take one with
   * std::exchange(item.buffer, nullptr)). */
  struct Item {
    GstBuffer* buffer = nullptr;
    GstEvent* event = nullptr;
    std::shared_ptr<const ItemData> data;
    gint64 arrival_us = 0;  // monotonic time it was queued (set by push)

    Item() = default;
    Item(Item&& o) noexcept;
    Item& operator=(Item&& o) noexcept;
    ~Item() { release(); }
    void release();  // drops the buffer / event references and the data
  };
  /* The element's side, called on the task without the queue's lock. */
  struct Handler {
    /* Handles one item, taking its buffer or event (what it leaves in the
     * item is released afterwards). Events: call push_event() to forward. */
    std::function<GstFlowReturn(Item&)> item;
    /* The time set with wake_at() came before the next item (optional). */
    std::function<GstFlowReturn()> wake;
    /* Runs on the task's thread when the task pauses itself (flushing, EOS,
     * an error) and as the task leaves it (stopped: the pad deactivated),
     * before the thread goes back to GStreamer's pool: frees what the
     * thread built for its work (optional; it may run more than once). */
    std::function<void()> leave;
    /* Runs on the task's thread when it has nothing to do and is about to
     * sleep (after polling): the place to give up what only matters while
     * it works (optional). Returns -1, or the microseconds after which it
     * wants to run again if the task is still idle then. */
    std::function<gint64()> idle;
  };

  SerialQueue(GstElement* element, GstPad* srcpad, Handler handler);
  ~SerialQueue();
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  /* ---- sink side: upstream's streaming thread ---- */

  /* Queues `item` (takes its references). A buffer waits while `limit`
   * buffers are queued. Returns GST_FLOW_OK, or what stops the queue (the
   * task's flow, or FLUSHING) after dropping the item. */
  GstFlowReturn push(Item item);
  GstFlowReturn push_event(GstEvent* event, std::shared_ptr<const ItemData> data = nullptr);
  /* FLUSH_START: forwarded downstream, then the task stops. */
  gboolean flush_start(GstEvent* event);
  /* FLUSH_STOP: drops what waits but sticky events (not segment, not EOS),
   * which are stored on the src pad, each shown to `kept` first; forwards
   * the event and restarts the task. */
  gboolean flush_stop(GstEvent* event, const std::function<void(const Item&)>& kept = {});
  /* Waits until no buffer is queued or being handled (events may wait);
   * false when the queue flushes meanwhile. */
  bool wait_idle();

  /* ---- either thread ---- */

  /* Buffers that may wait before push() blocks (at least 1). */
  void set_limit(guint buffers);
  guint limit();
  /* The src pad's activate-mode function: starts the task, or stops it
   * and drops what waits. Push mode only. */
  gboolean activate(GstPadMode mode, gboolean active);

  /* ---- task side: from the Handler ---- */

  /* Forwards a serialized event from the task: EOS gives GST_FLOW_EOS, caps
   * downstream refuses NOT_NEGOTIATED; a sticky event refused because the
   * src pad flushes goes back to the head of the queue (FLUSH_STOP keeps it
   * then) and gives FLUSHING. */
  GstFlowReturn forward_event(GstEvent* event, std::shared_ptr<const ItemData> data = nullptr);
  /* Takes the buffers at the head of the queue, in order, while `take`
   * accepts them (called with the queue's lock held: keep it short, no
   * GStreamer calls that may block); stops at the first event, note or
   * refused buffer. Never waits: only what is queued already (jobfunction's
   * adaptive batching). The slots they held are free for upstream. */
  std::vector<Item> take_buffers(const std::function<bool(const Item&)>& take);
  /* Calls Handler::wake at this monotonic time (us) unless an item comes
   * first; 0 = never. */
  void wake_at(gint64 monotonic_us) { wake_us_ = monotonic_us; }

 private:
  static void task(gpointer self);
  static void leave(GstTask* task, GThread* thread, gpointer self);
  gboolean start_task();  // gst_pad_start_task, with the Handler's leave
  void iterate();
  void stop_with(GstFlowReturn ret);
  void set_flushing(bool flushing);
  void clear();  // drops every item (call without mu_)
  /* cv_.wait(lk, ready) that first polls for jobflow::spin_us(): a slot or
   * an item usually comes within microseconds for small jobs, and a sleep
   * plus wake-up costs tens of them. Waits at most until `until_us`
   * (monotonic, 0 = no limit). `task`: the task's wait for items, which
   * runs the Handler's idle hook when polling found nothing. */
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lk, Ready ready, gint64 until_us = 0, bool task = false);
  void notify();  // with mu_ held, after a change

  GstElement* const element_;
  GstPad* const srcpad_;
  const Handler handler_;
  gint64 wake_us_ = 0;  // task only

  std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::deque<Item> items_;
  guint queued_buffers_ = 0;
  guint limit_ = 1;
  bool busy_ = false;  // the task handles a buffer
  bool flushing_ = true;
  GstFlowReturn srcresult_ = GST_FLOW_FLUSHING;
  std::atomic<uint64_t> changes_{0};  // bumped by notify(): what a polling waiter watches
};

}  // namespace jobflow::gst
