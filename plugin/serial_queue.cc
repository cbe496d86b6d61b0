/* SerialQueue. See serial_queue.h. */
#include "serial_queue.h"

#include "element_util.h"

#include <jobflow/poll.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

namespace jobflow::gst {

SerialQueue::Item::Item(Item&& o) noexcept
    : buffer(std::exchange(o.buffer, nullptr)),
      event(std::exchange(o.event, nullptr)),
      data(std::move(o.data)),
      arrival_us(o.arrival_us) {}

SerialQueue::Item& SerialQueue::Item::operator=(Item&& o) noexcept {
  if (this != &o) {
    release();
    buffer = std::exchange(o.buffer, nullptr);
    event = std::exchange(o.event, nullptr);
    data = std::move(o.data);
    arrival_us = o.arrival_us;
  }
  return *this;
}

void SerialQueue::Item::release() {
  if (buffer) gst_buffer_unref(buffer);
  if (event) gst_event_unref(event);
  buffer = nullptr;
  event = nullptr;
  data.reset();
}

SerialQueue::SerialQueue(GstElement* element, GstPad* srcpad, Handler handler)
    : element_(element), srcpad_(srcpad), handler_(std::move(handler)) {}

SerialQueue::~SerialQueue() { clear(); }

void SerialQueue::notify() {
  changes_.fetch_add(1, std::memory_order_release);
  cv_.notify_all();
}

template <class Ready>
void SerialQueue::wait(std::unique_lock<std::mutex>& lk, Ready ready, gint64 until_us, bool task) {
  if (ready()) return;
  const uint64_t seen = changes_.load(std::memory_order_acquire);
  gint64 idle_again_us = -1;
  if (jobflow::spin_us() > 0 || (task && handler_.idle)) {
    lk.unlock();
    jobflow::poll_while([&] { return changes_.load(std::memory_order_acquire) == seen; });
    /* Still nothing after polling: the task is going to sleep. */
    if (task && handler_.idle && changes_.load(std::memory_order_acquire) == seen) idle_again_us = handler_.idle();
    lk.lock();
  }
  if (idle_again_us >= 0) {  // the idle hook wants another look then: wake for it (the caller waits again)
    const gint64 again = g_get_monotonic_time() + idle_again_us + 1;
    until_us = until_us > 0 ? std::min(until_us, again) : again;
  }
  if (until_us <= 0) {
    cv_.wait(lk, ready);
    return;
  }
  const gint64 left = until_us - g_get_monotonic_time();
  if (left > 0) cv_.wait_for(lk, std::chrono::microseconds(left), ready);
}

void SerialQueue::clear() {
  std::deque<Item> old;  // released outside the lock: a buffer's last unref may run code
  std::lock_guard<std::mutex> lk(mu_);
  old.swap(items_);
  queued_buffers_ = 0;
  notify();
}

void SerialQueue::set_flushing(bool flushing) {
  std::lock_guard<std::mutex> lk(mu_);
  flushing_ = flushing;
  srcresult_ = flushing ? GST_FLOW_FLUSHING : GST_FLOW_OK;
  notify();
}

void SerialQueue::set_limit(guint buffers) {
  std::lock_guard<std::mutex> lk(mu_);
  limit_ = std::max(1u, buffers);
  notify();  // a waiting push may fit now
}

guint SerialQueue::limit() {
  std::lock_guard<std::mutex> lk(mu_);
  return limit_;
}

GstFlowReturn SerialQueue::push(Item item) {
  GstFlowReturn ret;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (item.buffer)
      wait(lk, [&] { return flushing_ || srcresult_ != GST_FLOW_OK || queued_buffers_ < limit_; });
    ret = srcresult_;
    if (ret == GST_FLOW_OK) {
      item.arrival_us = g_get_monotonic_time();
      items_.push_back(std::move(item));
      if (items_.back().buffer) queued_buffers_++;
      notify();
      return GST_FLOW_OK;
    }
  }
  item.release();
  return ret;
}

GstFlowReturn SerialQueue::push_event(GstEvent* event, std::shared_ptr<const ItemData> data) {
  Item item;
  item.event = event;
  item.data = std::move(data);
  return push(std::move(item));
}

gboolean SerialQueue::flush_start(GstEvent* event) {
  const gboolean ok = gst_pad_push_event(srcpad_, event);
  set_flushing(true);
  gst_pad_pause_task(srcpad_);  // waits for the task to leave the Handler
  return ok;
}

gboolean SerialQueue::flush_stop(GstEvent* event, const std::function<void(const Item&)>& kept) {
  /* The task is paused and upstream is in this call: nobody else touches
   * the items. */
  std::deque<Item> old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    old.swap(items_);
    queued_buffers_ = 0;
  }
  for (Item& it : old) {
    if (it.event && is_sticky(it.event) && GST_EVENT_TYPE(it.event) != GST_EVENT_SEGMENT &&
        GST_EVENT_TYPE(it.event) != GST_EVENT_EOS) {
      if (kept) kept(it);
      gst_pad_store_sticky_event(srcpad_, it.event);
    }
    it.release();
  }
  set_flushing(false);
  const gboolean ok = gst_pad_push_event(srcpad_, event);
  start_task();
  return ok;
}

bool SerialQueue::wait_idle() {
  std::unique_lock<std::mutex> lk(mu_);
  wait(lk, [&] { return flushing_ || (queued_buffers_ == 0 && !busy_); });
  return !flushing_;
}

gboolean SerialQueue::activate(GstPadMode mode, gboolean active) {
  if (mode != GST_PAD_MODE_PUSH) return FALSE;
  if (active) {
    set_flushing(false);
    return start_task();
  }
  set_flushing(true);
  const gboolean ok = gst_pad_stop_task(srcpad_);
  clear();
  return ok;
}

GstFlowReturn SerialQueue::forward_event(GstEvent* event, std::shared_ptr<const ItemData> data) {
  const GstEventType type = GST_EVENT_TYPE(event);
  GstEvent* keep = is_sticky(event) ? gst_event_ref(event) : nullptr;
  const bool ok = gst_pad_push_event(srcpad_, event);
  if (!ok && GST_PAD_IS_FLUSHING(srcpad_)) {
    /* Refused by the flushing pad (and maybe not stored there): back to
     * the head, where FLUSH_STOP keeps it; the task stops as flushing, not
     * with a not-negotiated error. */
    if (keep) {
      Item back;
      back.event = keep;
      back.data = std::move(data);
      std::lock_guard<std::mutex> lk(mu_);
      items_.push_front(std::move(back));
    }
    return GST_FLOW_FLUSHING;
  }
  if (keep) gst_event_unref(keep);
  if (type == GST_EVENT_EOS) return GST_FLOW_EOS;
  if (type == GST_EVENT_CAPS && !ok) return GST_FLOW_NOT_NEGOTIATED;
  return GST_FLOW_OK;
}

std::vector<SerialQueue::Item> SerialQueue::take_buffers(const std::function<bool(const Item&)>& take) {
  std::vector<Item> taken;
  std::lock_guard<std::mutex> lk(mu_);
  while (!flushing_ && !items_.empty() && items_.front().buffer && take(items_.front())) {
    taken.push_back(std::move(items_.front()));
    items_.pop_front();
    queued_buffers_--;
  }
  if (!taken.empty()) notify();  // slots for upstream
  return taken;
}

void SerialQueue::task(gpointer self) { static_cast<SerialQueue*>(self)->iterate(); }

void SerialQueue::leave(GstTask*, GThread*, gpointer self) { static_cast<SerialQueue*>(self)->handler_.leave(); }

gboolean SerialQueue::start_task() {
  if (!gst_pad_start_task(srcpad_, task, this, nullptr)) return FALSE;
  if (!handler_.leave) return TRUE;
  /* The task reads its leave callback when it leaves, under its lock: set
   * now, it is there for that (a restarted pad makes a new task). */
  GST_OBJECT_LOCK(srcpad_);
  GstTask* t = GST_PAD_TASK(srcpad_) ? GST_TASK(gst_object_ref(GST_PAD_TASK(srcpad_))) : nullptr;
  GST_OBJECT_UNLOCK(srcpad_);
  if (t) {
    gst_task_set_leave_callback(t, leave, this, nullptr);
    gst_object_unref(t);
  }
  return TRUE;
}

void SerialQueue::iterate() {
  Item item;
  bool woke = false;
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (flushing_) {
        lk.unlock();
        if (handler_.leave) handler_.leave();  // paused: nothing to compute until a restart
        gst_pad_pause_task(srcpad_);
        return;
      }
      if (wake_us_ > 0 && g_get_monotonic_time() >= wake_us_) {  // a deadline passed goes first
        woke = true;
        break;
      }
      if (!items_.empty()) {
        item = std::move(items_.front());
        items_.pop_front();
        if (item.buffer) {
          queued_buffers_--;
          busy_ = true;
        }
        notify();  // a slot for upstream
        break;
      }
      wait(lk, [&] { return flushing_ || !items_.empty(); }, wake_us_, true);
    }
  }

  const bool was_buffer = item.buffer != nullptr;
  GstFlowReturn ret = GST_FLOW_OK;
  try {
    if (woke) {
      wake_us_ = 0;
      if (handler_.wake) ret = handler_.wake();
    } else {
      ret = handler_.item(item);
    }
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(element_, CORE, FAILED, ("%s: its task failed", GST_ELEMENT_NAME(element_)),
                      ("%s", e.what()));
    ret = GST_FLOW_ERROR;
  }
  item.release();
  if (was_buffer) {
    std::lock_guard<std::mutex> lk(mu_);
    busy_ = false;
    notify();
  }
  if (ret != GST_FLOW_OK) stop_with(ret);
}

void SerialQueue::stop_with(GstFlowReturn ret) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!flushing_) srcresult_ = ret;  // what push() answers upstream from now on
    notify();
  }
  if (handler_.leave) handler_.leave();  // paused (EOS, an error): nothing to compute until a restart
  gst_pad_pause_task(srcpad_);
  if (ret == GST_FLOW_NOT_LINKED || ret < GST_FLOW_EOS) {
    /* GST_FLOW_ERROR: the element (or downstream) posted the error. */
    if (ret != GST_FLOW_ERROR) GST_ELEMENT_FLOW_ERROR(element_, ret);
    gst_pad_push_event(srcpad_, gst_event_new_eos());
  }
}

}  // namespace jobflow::gst
