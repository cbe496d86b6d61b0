// FileWriter: TensorBoard event files (Event protos, TFRecord framing).
// Built when protobuf and protoc are (the onnx feature); writer_none.cpp
// stands in otherwise.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>

#include "jobflow/summary.h"
#include "jobflow/tensor.h"
#include "tb_event.pb.h"

namespace jobflow::summary {
namespace {

namespace fs = std::filesystem;
std::atomic<int> g_files{0};  // <n> of the file names: distinct per process

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

}  // namespace

struct FileWriter::Impl {
  std::mutex mu;
  std::FILE* file = nullptr;
  std::string path;
  std::string record, bytes;  // reused per event
  tb::Event event;

  // Frames the event and hands it to the FILE buffer. Holds mu.
  void write_event() {
    bytes.clear();
    if (!event.SerializeToString(&bytes)) throw Error("[summary.FileWriter] " + path + ": an event did not serialize");
    record.clear();
    append_record(record, bytes);
    if (std::fwrite(record.data(), 1, record.size(), file) != record.size())
      throw Error("[summary.FileWriter] writing " + path + " failed: " + std::strerror(errno));
  }
  void flush_locked() {
    if (std::fflush(file) != 0) throw Error("[summary.FileWriter] writing " + path + " failed: " + std::strerror(errno));
  }
};

FileWriter::FileWriter(const std::string& logdir) : impl_(std::make_unique<Impl>()) {
  if (logdir.empty()) throw Error("[summary.FileWriter] no folder given for the event files");
  std::error_code ec;
  fs::create_directories(logdir, ec);
  if (ec || !fs::is_directory(logdir))
    throw Error("[summary.FileWriter] cannot make the folder '" + logdir + "': " +
                (ec ? ec.message() : std::string("a file of that name is in the way")));
  const std::string name = "events.out.tfevents." + std::to_string(static_cast<long long>(std::time(nullptr))) + "." +
                           host_name() + "." + std::to_string(static_cast<long long>(getpid())) + "." +
                           std::to_string(g_files++);
  impl_->path = (fs::path(logdir) / name).string();
  impl_->file = std::fopen(impl_->path.c_str(), "wbx");  // x: never append to another writer's file
  if (!impl_->file)
    throw Error("[summary.FileWriter] cannot create '" + impl_->path + "': " + std::strerror(errno));
  try {
    impl_->event.set_wall_time(now_seconds());
    impl_->event.set_step(0);
    impl_->event.set_file_version("brain.Event:2");
    impl_->write_event();
    impl_->flush_locked();
  } catch (...) {
    std::fclose(impl_->file);
    throw;
  }
}

FileWriter::~FileWriter() {
  if (impl_ && impl_->file) std::fclose(impl_->file);  // fclose flushes
}

void FileWriter::scalar(const std::string& tag, double value, int64_t step) { scalars({{tag, value}}, step); }

void FileWriter::scalars(const std::vector<std::pair<std::string, double>>& values, int64_t step) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  tb::Event& e = impl_->event;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  tb::Summary* s = e.mutable_summary();  // clears file_version (oneof)
  s->clear_value();
  for (const auto& [tag, v] : values) {
    tb::Summary::Value* val = s->add_value();
    val->set_tag(tag);
    val->set_simple_value(static_cast<float>(v));
  }
  impl_->write_event();
}

void FileWriter::flush() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->flush_locked();
}

const std::string& FileWriter::path() const { return impl_->path; }

}  // namespace jobflow::summary
