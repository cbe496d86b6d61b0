/* jobmetapublish. See gstjobmetapublish.h and docs/elements.md.
 *
 * Threads. The streaming thread (transform_ip) turns each frame into a
 * JSON line and queues it (Publisher::push, never blocking). A writer
 * thread made at start() empties the queue: into the file or stdout, or, for
 * MQTT, into the libmosquitto client it runs itself (poll() on the socket
 * and a wake-up pipe; connect, reconnect every second, read, write,
 * keep-alive all on that thread, so the client is used by one thread only).
 * stop() ends the thread; what is still queued then is lost (EOS waits for
 * it first). */
#include "gstjobmetapublish.h"

#include "element_util.h"
#include "meta_json.h"

#include <glib-unix.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#ifdef JOBFLOW_HAVE_MOSQUITTO
#include <mosquitto.h>
#endif

GST_DEBUG_CATEGORY_STATIC(jobmetapublish_debug);
#define GST_CAT_DEFAULT jobmetapublish_debug

namespace {

enum Method { kFile = 0, kStdout = 1, kMqtt = 2 };

constexpr guint kDefaultMaxQueue = 64;
constexpr guint kDefaultPort = 1883;
constexpr guint kMaxInflight = 16;       // MQTT messages handed to the client, not yet acknowledged
constexpr int kReconnectMs = 1000;
constexpr int kKeepAliveS = 10;

struct Settings {
  Method method = kFile;
  std::string location;
  std::string host = "127.0.0.1";
  guint port = kDefaultPort;
  std::string topic = "jobflow/metas";
  std::string client_id;
  guint mqtt_qos = 1;
  guint max_queue = kDefaultMaxQueue;
  guint max_values = 0;
};

/* The queue and its writer (made at start, dropped at stop). */
class Publisher {
 public:
  Publisher(GstElement* element, Settings cfg) : element_(element), cfg_(std::move(cfg)) {}
  virtual ~Publisher() = default;
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  /* Streaming thread: queues a line, dropping the oldest when full. */
  void push(std::string line) {
    bool warn = false;
    guint64 dropped = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (queue_.size() >= cfg_.max_queue) {
        queue_.pop_front();
        dropped = ++dropped_;
        warn = !warned_;
        warned_ = true;
      }
      queue_.push_back(std::move(line));
      cv_.notify_all();
    }
    wake();
    if (warn)
      GST_ELEMENT_WARNING(element_, RESOURCE, WRITE,
                          ("The output does not keep up: dropped the oldest of %u queued lines (%" G_GUINT64_FORMAT
                           " dropped so far; property 'dropped')",
                           cfg_.max_queue, dropped),
                          ("max-queue=%u", cfg_.max_queue));
  }
  /* EOS: waits until every queued line is out, the output is gone (MQTT
   * broker away), or the publisher stops. */
  void drain() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] {
      return stopping_ || interrupted_ || ((queue_.empty() && busy_ == 0) || !reachable_locked());
    });
  }
  /* A flush or a state change down: a waiting drain() returns (until resume()). */
  void interrupt() {
    std::lock_guard<std::mutex> lk(mu_);
    interrupted_ = true;
    cv_.notify_all();
  }
  void resume() {
    std::lock_guard<std::mutex> lk(mu_);
    interrupted_ = false;
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    wake();
    if (thread_.joinable()) thread_.join();
  }
  guint64 dropped() {
    std::lock_guard<std::mutex> lk(mu_);
    return dropped_;
  }
  guint64 published() const { return published_.load(); }
  bool connected() const { return connected_.load(); }
  virtual bool start() = 0;

 protected:
  virtual void wake() {}
  /* With mu_ held: can queued lines go out now? */
  virtual bool reachable_locked() { return true; }
  /* Takes up to `max` lines (mu_ held), counted in busy_ until done(). */
  std::deque<std::string> take_locked(size_t max) {
    std::deque<std::string> out;
    while (!queue_.empty() && out.size() < max) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    busy_ += out.size();
    if (queue_.empty()) warned_ = false;  // the next drop is news again
    return out;
  }
  void done(size_t n, bool delivered) {
    std::lock_guard<std::mutex> lk(mu_);
    busy_ -= std::min(busy_, n);
    if (delivered) published_ += n;
    cv_.notify_all();
  }

  GstElement* const element_;
  const Settings cfg_;
  std::mutex mu_;  // guards the queue and the flags below
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t busy_ = 0;  // lines taken from the queue and not yet out
  guint64 dropped_ = 0;
  bool warned_ = false;  // a drop warning was posted since the queue was last empty
  bool stopping_ = false;
  bool interrupted_ = false;
  std::atomic<guint64> published_{0};
  std::atomic<bool> connected_{false};
  std::thread thread_;
};

/* File or stdout: one line each, flushed, in order. */
class StreamPublisher : public Publisher {
 public:
  using Publisher::Publisher;
  ~StreamPublisher() override {
    stop();
    if (file_ && file_ != stdout) std::fclose(file_);
  }
  bool start() override {
    if (cfg_.method == kStdout) {
      file_ = stdout;
    } else {
      if (cfg_.location.empty()) {
        GST_ELEMENT_ERROR(element_, RESOURCE, SETTINGS, ("Property 'location' is not set (method=file)"),
                          ("set location to the file the JSON lines go to, or method=stdout"));
        return false;
      }
      file_ = std::fopen(cfg_.location.c_str(), "w");
      if (!file_) {
        GST_ELEMENT_ERROR(element_, RESOURCE, OPEN_WRITE,
                          ("location=\"%s\": cannot open for writing: %s", cfg_.location.c_str(),
                           g_strerror(errno)),
                          (nullptr));
        return false;
      }
    }
    connected_ = true;
    thread_ = std::thread([this] { run(); });
    return true;
  }

 private:
  void run() {
    bool failed = false;
    for (;;) {
      std::deque<std::string> lines;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        lines = take_locked(queue_.size());
      }
      bool ok = !failed;
      for (const std::string& l : lines) {
        if (!ok) break;
        ok = std::fwrite(l.data(), 1, l.size(), file_) == l.size() && std::fputc('\n', file_) != EOF;
      }
      ok = ok && std::fflush(file_) == 0;
      if (!ok && !failed) {
        failed = true;  // once: the lines after it are lost too
        GST_ELEMENT_ERROR(element_, RESOURCE, WRITE,
                          ("Writing the JSON lines to %s failed: %s",
                           cfg_.method == kStdout ? "stdout" : cfg_.location.c_str(), g_strerror(errno)),
                          (nullptr));
      }
      done(lines.size(), ok);
    }
  }
  FILE* file_ = nullptr;
};

#ifdef JOBFLOW_HAVE_MOSQUITTO

void mosquitto_init_once() {
  static gsize done = 0;
  if (g_once_init_enter(&done)) {
    mosquitto_lib_init();
    g_once_init_leave(&done, 1);
  }
}

/* MQTT: the client and its network loop on the writer thread. */
class MqttPublisher : public Publisher {
 public:
  using Publisher::Publisher;
  ~MqttPublisher() override {
    stop();
    if (mosq_) mosquitto_destroy(mosq_);
    if (wake_[0] >= 0) close(wake_[0]);
    if (wake_[1] >= 0) close(wake_[1]);
  }
  bool start() override {
    mosquitto_init_once();
    if (cfg_.topic.empty()) {
      GST_ELEMENT_ERROR(element_, RESOURCE, SETTINGS, ("Property 'topic' is empty (method=mqtt)"), (nullptr));
      return false;
    }
    std::string id = cfg_.client_id;
    if (id.empty()) id = "jobflow-" + std::to_string(getpid()) + "-" + GST_ELEMENT_NAME(element_);
    mosq_ = mosquitto_new(id.c_str(), true, this);
    GError* err = nullptr;
    if (!mosq_ || !g_unix_open_pipe(wake_, FD_CLOEXEC, &err) || !g_unix_set_fd_nonblocking(wake_[0], TRUE, &err)) {
      GST_ELEMENT_ERROR(element_, RESOURCE, FAILED, ("Could not make the MQTT client (client-id \"%s\")", id.c_str()),
                        ("%s", err ? err->message : g_strerror(errno)));
      g_clear_error(&err);
      return false;
    }
    mosquitto_connect_callback_set(mosq_, [](mosquitto*, void* self, int rc) {
      static_cast<MqttPublisher*>(self)->on_connect(rc);
    });
    mosquitto_disconnect_callback_set(mosq_, [](mosquitto*, void* self, int rc) {
      static_cast<MqttPublisher*>(self)->on_disconnect(rc);
    });
    mosquitto_publish_callback_set(mosq_, [](mosquitto*, void* self, int) {
      static_cast<MqttPublisher*>(self)->done(1, true);
    });
    thread_ = std::thread([this] { run(); });
    return true;
  }

 protected:
  void wake() override {
    if (wake_[1] >= 0) {
      const char c = 0;
      if (write(wake_[1], &c, 1) < 0) {
        /* full: a wake-up is pending anyway */
      }
    }
  }
  bool reachable_locked() override { return connected_.load(); }

 private:
  void post(bool connected, const std::string& reason) {
    GstStructure* s = gst_structure_new(JOBFLOW_MQTT_MESSAGE_NAME, "connected", G_TYPE_BOOLEAN, connected, "host",
                                        G_TYPE_STRING, cfg_.host.c_str(), "port", G_TYPE_UINT, cfg_.port, nullptr);
    if (!reason.empty()) gst_structure_set(s, "reason", G_TYPE_STRING, reason.c_str(), nullptr);
    gst_element_post_message(element_, gst_message_new_element(GST_OBJECT(element_), s));
  }
  /* Called on the writer thread (inside the client's loop functions). */
  void on_connect(int rc) {
    if (rc != 0) {
      set_connected(false, mosquitto_connack_string(rc));
      return;
    }
    set_connected(true, "");
  }
  void on_disconnect(int rc) { set_connected(false, rc == 0 ? "disconnected" : mosquitto_strerror(rc)); }
  void set_connected(bool up, const std::string& reason) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      const bool was = connected_.exchange(up);
      if (was == up && announced_) return;
      announced_ = true;
      if (!up && cfg_.mqtt_qos == 0) busy_ = 0;  // QoS 0 messages on the wire are lost, not resent
      cv_.notify_all();  // drain() gives up while the broker is away
    }
    GST_INFO_OBJECT(element_, "MQTT %s:%u %s %s", cfg_.host.c_str(), cfg_.port, up ? "connected" : "away",
                    reason.c_str());
    post(up, reason);
  }

  /* Hands queued lines to the client while connected (writer thread). */
  void publish_queued() {
    for (;;) {
      std::deque<std::string> lines;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (!connected_ || stopping_ || busy_ >= kMaxInflight) return;
        lines = take_locked(kMaxInflight - busy_);
      }
      if (lines.empty()) return;
      for (size_t i = 0; i < lines.size(); ++i) {
        const std::string& l = lines[i];
        const int rc = mosquitto_publish(mosq_, nullptr, cfg_.topic.c_str(), static_cast<int>(l.size()), l.data(),
                                         static_cast<int>(cfg_.mqtt_qos), false);
        if (rc != MOSQ_ERR_SUCCESS) {
          /* Not taken (the connection just went): back to the head. */
          std::lock_guard<std::mutex> lk(mu_);
          for (size_t j = lines.size(); j-- > i;) queue_.push_front(std::move(lines[j]));
          busy_ -= std::min(busy_, lines.size() - i);
          return;
        }
      }
    }
  }

  void run() {
    bool have_socket = false;
    bool first = true;
    while (!stopping()) {
      if (!have_socket) {
        const int rc = first ? mosquitto_connect(mosq_, cfg_.host.c_str(), static_cast<int>(cfg_.port), kKeepAliveS)
                             : mosquitto_reconnect(mosq_);
        if (rc == MOSQ_ERR_SUCCESS) {
          first = false;
          have_socket = true;
        } else {
          if (rc == MOSQ_ERR_INVAL && first) {
            GST_ELEMENT_ERROR(element_, RESOURCE, SETTINGS,
                              ("Invalid MQTT broker address host=\"%s\" port=%u", cfg_.host.c_str(), cfg_.port),
                              ("%s", mosquitto_strerror(rc)));
            return;
          }
          set_connected(false, rc == MOSQ_ERR_ERRNO ? g_strerror(errno) : mosquitto_strerror(rc));
          wait_ms(kReconnectMs);
          continue;
        }
      }
      publish_queued();
      const int sock = mosquitto_socket(mosq_);
      if (sock < 0) {
        have_socket = false;
        continue;
      }
      pollfd fds[2] = {{sock, static_cast<short>(POLLIN | (mosquitto_want_write(mosq_) ? POLLOUT : 0)), 0},
                       {wake_[0], POLLIN, 0}};
      const int n = poll(fds, 2, 1000);  // at least once a second for keep-alive
      if (n < 0 && errno != EINTR) break;
      if (fds[1].revents & POLLIN) {
        char buf[64];
        while (read(wake_[0], buf, sizeof buf) > 0) {
        }
      }
      int rc = MOSQ_ERR_SUCCESS;
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) rc = mosquitto_loop_read(mosq_, 1);
      if (rc == MOSQ_ERR_SUCCESS && (fds[0].revents & POLLOUT)) rc = mosquitto_loop_write(mosq_, 1);
      if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_loop_misc(mosq_);
      if (rc != MOSQ_ERR_SUCCESS) {
        set_connected(false, mosquitto_strerror(rc));
        have_socket = false;
        wait_ms(kReconnectMs);
      }
    }
    if (have_socket && connected_) {
      mosquitto_disconnect(mosq_);
      mosquitto_loop_write(mosq_, 1);
    }
  }
  bool stopping() {
    std::lock_guard<std::mutex> lk(mu_);
    return stopping_;
  }
  void wait_ms(int ms) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return stopping_; });
  }

  mosquitto* mosq_ = nullptr;
  int wake_[2] = {-1, -1};
  bool announced_ = false;  // a connection message was posted (the first one always is)
};

#endif  // JOBFLOW_HAVE_MOSQUITTO

struct Impl {
  jobflow::gst::Locked<Settings> settings;
  /* Made in start, dropped in stop (state changes); read by the streaming
   * thread and the property getters while it lives. */
  std::shared_ptr<Publisher> publisher;
  std::mutex publisher_mu;
  guint max_values = 0;  // streaming state, from the settings at start
  std::shared_ptr<Publisher> get() {
    std::lock_guard<std::mutex> lk(publisher_mu);
    return publisher;
  }
};

}  // namespace

struct _GstJobMetaPublish {
  GstBaseTransform parent;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobMetaPublish, gst_job_meta_publish, GST_TYPE_BASE_TRANSFORM)

namespace {

enum {
  PROP_0, PROP_METHOD, PROP_LOCATION, PROP_HOST, PROP_PORT, PROP_TOPIC, PROP_CLIENT_ID, PROP_MQTT_QOS,
  PROP_MAX_QUEUE, PROP_MAX_VALUES, PROP_DROPPED, PROP_PUBLISHED, PROP_CONNECTED
};

GType method_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {{kFile, "A file (property 'location')", "file"},
                                      {kStdout, "The process's standard output", "stdout"},
                                      {kMqtt, "An MQTT broker (host, port, topic)", "mqtt"},
                                      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobMetaPublishMethod", values);
}

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);
GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);

gboolean start(GstBaseTransform* trans) {
  GstJobMetaPublish* self = GST_JOB_META_PUBLISH(trans);
  Impl& p = *self->impl;
  const Settings cfg = p.settings.copy();
  std::shared_ptr<Publisher> pub;
  if (cfg.method == kMqtt) {
#ifdef JOBFLOW_HAVE_MOSQUITTO
    pub = std::make_shared<MqttPublisher>(GST_ELEMENT(self), cfg);
#else
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("method=mqtt: this build of Jobflow has no MQTT client"),
                      ("built without libmosquitto (Debian: libmosquitto-dev)"));
    return FALSE;
#endif
  } else {
    pub = std::make_shared<StreamPublisher>(GST_ELEMENT(self), cfg);
  }
  if (!pub->start()) return FALSE;
  p.max_values = cfg.max_values;
  std::lock_guard<std::mutex> lk(p.publisher_mu);
  p.publisher = std::move(pub);
  return TRUE;
}

gboolean stop(GstBaseTransform* trans) {
  Impl& p = *GST_JOB_META_PUBLISH(trans)->impl;
  std::shared_ptr<Publisher> pub;
  {
    std::lock_guard<std::mutex> lk(p.publisher_mu);
    pub.swap(p.publisher);
  }
  if (pub) pub->stop();  // outside the lock: joins the writer thread
  return TRUE;
}

GstFlowReturn transform_ip(GstBaseTransform* trans, GstBuffer* buf) {
  GstJobMetaPublish* self = GST_JOB_META_PUBLISH(trans);
  Impl& p = *self->impl;
  std::shared_ptr<Publisher> pub = p.get();
  if (!pub) return GST_FLOW_OK;
  return jobflow::gst::guarded(GST_ELEMENT(self), "Publishing", GST_FLOW_ERROR, [&] {
    JobflowMetaJsonOptions options = {};
    options.max_values = p.max_values;
    options.segment = &trans->segment;
    const guint frames = jobflow_meta_json_frames(buf);
    for (guint i = 0; i < frames; ++i) {
      gchar* line = jobflow_meta_json_frame(buf, i, &options);
      pub->push(line);
      g_free(line);
    }
    return GST_FLOW_OK;
  });
}

gboolean sink_event(GstBaseTransform* trans, GstEvent* event) {
  std::shared_ptr<Publisher> pub = GST_JOB_META_PUBLISH(trans)->impl->get();
  if (pub && GST_EVENT_TYPE(event) == GST_EVENT_EOS) pub->drain();  // everything out before EOS goes on
  if (pub && GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_START) pub->interrupt();
  if (pub && GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP) pub->resume();
  return GST_BASE_TRANSFORM_CLASS(gst_job_meta_publish_parent_class)->sink_event(trans, event);
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) {
    /* A drain() at EOS holds the streaming thread: let it go before the
     * pads are deactivated (which waits for that thread). */
    std::shared_ptr<Publisher> pub = GST_JOB_META_PUBLISH(element)->impl->get();
    if (pub) pub->interrupt();
  }
  return GST_ELEMENT_CLASS(gst_job_meta_publish_parent_class)->change_state(element, transition);
}

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_META_PUBLISH(object)->impl->settings.with([&](Settings& s) {
    auto str = [&] {
      const gchar* v = g_value_get_string(value);
      return std::string(v ? v : "");
    };
    switch (prop_id) {
      case PROP_METHOD: s.method = static_cast<Method>(g_value_get_enum(value)); break;
      case PROP_LOCATION: s.location = str(); break;
      case PROP_HOST: s.host = str(); break;
      case PROP_PORT: s.port = g_value_get_uint(value); break;
      case PROP_TOPIC: s.topic = str(); break;
      case PROP_CLIENT_ID: s.client_id = str(); break;
      case PROP_MQTT_QOS: s.mqtt_qos = g_value_get_uint(value); break;
      case PROP_MAX_QUEUE: s.max_queue = g_value_get_uint(value); break;
      case PROP_MAX_VALUES: s.max_values = g_value_get_uint(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  Impl& p = *GST_JOB_META_PUBLISH(object)->impl;
  switch (prop_id) {
    case PROP_DROPPED: {
      std::shared_ptr<Publisher> pub = p.get();
      g_value_set_uint64(value, pub ? pub->dropped() : 0);
      return;
    }
    case PROP_PUBLISHED: {
      std::shared_ptr<Publisher> pub = p.get();
      g_value_set_uint64(value, pub ? pub->published() : 0);
      return;
    }
    case PROP_CONNECTED: {
      std::shared_ptr<Publisher> pub = p.get();
      g_value_set_boolean(value, pub && pub->connected());
      return;
    }
    default:
      break;
  }
  p.settings.with([&](const Settings& s) {
    switch (prop_id) {
      case PROP_METHOD: g_value_set_enum(value, s.method); break;
      case PROP_LOCATION: g_value_set_string(value, s.location.empty() ? nullptr : s.location.c_str()); break;
      case PROP_HOST: g_value_set_string(value, s.host.c_str()); break;
      case PROP_PORT: g_value_set_uint(value, s.port); break;
      case PROP_TOPIC: g_value_set_string(value, s.topic.c_str()); break;
      case PROP_CLIENT_ID: g_value_set_string(value, s.client_id.c_str()); break;
      case PROP_MQTT_QOS: g_value_set_uint(value, s.mqtt_qos); break;
      case PROP_MAX_QUEUE: g_value_set_uint(value, s.max_queue); break;
      case PROP_MAX_VALUES: g_value_set_uint(value, s.max_values); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_meta_publish_class_init(GstJobMetaPublishClass* klass) {
  GObjectClass* gobject_class =
      jobflow::gst::init_object_class<GstJobMetaPublish>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass* transform_class = GST_BASE_TRANSFORM_CLASS(klass);
  element_class->change_state = change_state;
  transform_class->start = start;
  transform_class->stop = stop;
  transform_class->transform_ip = transform_ip;
  transform_class->sink_event = sink_event;
  transform_class->passthrough_on_same_caps = TRUE;
  transform_class->transform_ip_on_passthrough = TRUE;

  const auto ready = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  const auto readonly = static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_property(
      gobject_class, PROP_METHOD,
      g_param_spec_enum("method", "Method", "Where the JSON lines go: a file, stdout or an MQTT broker",
                        method_get_type(), kFile, ready));
  g_object_class_install_property(
      gobject_class, PROP_LOCATION,
      g_param_spec_string("location", "Location", "method=file: the file (made or emptied when the element starts)",
                          nullptr, ready));
  g_object_class_install_property(
      gobject_class, PROP_HOST,
      g_param_spec_string("host", "Host", "method=mqtt: the broker's host name or address", "127.0.0.1", ready));
  g_object_class_install_property(
      gobject_class, PROP_PORT,
      g_param_spec_uint("port", "Port", "method=mqtt: the broker's port", 1, 65535, kDefaultPort, ready));
  g_object_class_install_property(
      gobject_class, PROP_TOPIC,
      g_param_spec_string("topic", "Topic", "method=mqtt: the topic every line is published to", "jobflow/metas",
                          ready));
  g_object_class_install_property(
      gobject_class, PROP_CLIENT_ID,
      g_param_spec_string("client-id", "Client id",
                          "method=mqtt: the MQTT client id (empty = jobflow-<pid>-<element name>)", "", ready));
  g_object_class_install_property(
      gobject_class, PROP_MQTT_QOS,
      g_param_spec_uint("mqtt-qos", "MQTT QoS",
                        "method=mqtt: 0 = at most once, 1 = at least once (resent after a reconnect), 2 = exactly "
                        "once",
                        0, 2, 1, ready));
  g_object_class_install_property(
      gobject_class, PROP_MAX_QUEUE,
      g_param_spec_uint("max-queue", "Maximum queue",
                        "Lines that may wait for the output; when full the oldest is dropped (property 'dropped')",
                        1, G_MAXINT, kDefaultMaxQueue, ready));
  g_object_class_install_property(
      gobject_class, PROP_MAX_VALUES,
      g_param_spec_uint("max-values", "Maximum values",
                        "Tensor values written per tensor of a frame (0 = shapes and types only)", 0, G_MAXINT, 0,
                        ready));
  g_object_class_install_property(
      gobject_class, PROP_DROPPED,
      g_param_spec_uint64("dropped", "Dropped", "Lines dropped because the queue was full (since the start)", 0,
                          G_MAXUINT64, 0, readonly));
  g_object_class_install_property(
      gobject_class, PROP_PUBLISHED,
      g_param_spec_uint64("published", "Published",
                          "Lines written (file, stdout) or published (MQTT: acknowledged by the broker with QoS 1 "
                          "and 2) since the start",
                          0, G_MAXUINT64, 0, readonly));
  g_object_class_install_property(
      gobject_class, PROP_CONNECTED,
      g_param_spec_boolean("connected", "Connected",
                           "method=mqtt: connected to the broker now (file and stdout: while started)", FALSE,
                           readonly));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow meta publisher", "Filter/Metadata",
                                        "Writes each frame's metas as JSON lines to a file, stdout or an MQTT "
                                        "broker, passing the frames on",
                                        "Jobflow");
  gst_type_mark_as_plugin_api(method_get_type(), static_cast<GstPluginAPIFlags>(0));
}

static void gst_job_meta_publish_init(GstJobMetaPublish* self) {
  self->impl = new Impl();
  gst_base_transform_set_passthrough(GST_BASE_TRANSFORM(self), TRUE);
}

gboolean jobflow_register_jobmetapublish(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobmetapublish_debug, "jobmetapublish", 0, "Jobflow meta publisher");
  return gst_element_register(plugin, "jobmetapublish", GST_RANK_NONE, GST_TYPE_JOB_META_PUBLISH);
}
