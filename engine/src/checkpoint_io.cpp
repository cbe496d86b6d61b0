// jobflow/checkpoint_io.cpp — OneFlow checkpoint folders (see the header for
// the layout and the atomic-save protocol).
#include "jobflow/checkpoint_io.h"

#include "checkpoint_io_testing.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>

namespace jobflow::checkpoint_io {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSave = "[CheckPoint.save] ";
constexpr const char* kLoad = "[CheckPoint.load] ";
constexpr const char* kLoadVar = "[CheckPoint.load_variable] ";
constexpr const char* kDone = "snapshot_done";
constexpr const char* kOut = "out";
constexpr const char* kMeta = "meta";

std::string errno_text(int e) { return std::strerror(e); }

[[noreturn]] void sys_fail(const char* where, const std::string& path, const std::string& what, int e) {
  throw Error(std::string(where) + path + ": " + what + ": " + errno_text(e));
}

bool exists(const std::string& p, struct stat* out = nullptr) {
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0) return false;
  if (out) *out = st;
  return true;
}
bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// "a/b/" -> "a/b" (so that the tmp/old siblings land next to it, not in it).
std::string normalize(const char* where, std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty() || dir == "/" || dir == "." || dir == "..")
    throw Error(std::string(where) + "'" + dir + "' cannot be a checkpoint folder");
  return dir;
}

std::string parent_of(const std::string& dir) {
  std::string p = fs::path(dir).parent_path().string();
  return p.empty() ? "." : p;
}
std::string base_of(const std::string& dir) { return fs::path(dir).filename().string(); }

void check_name(const char* where, const std::string& name) {
  if (name.empty() || name == "." || name.find('/') != std::string::npos ||
      name.find("..") != std::string::npos || name.find('\0') != std::string::npos || name == kDone)
    throw Error(std::string(where) + "invalid variable name '" + name +
                "' (it names a folder: no '/', no '..', not empty, not 'snapshot_done')");
}

// ------------------------------------------------------------ file writes

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) sys_fail(kSave, path, "cannot open for fsync", errno);
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    sys_fail(kSave, path, "fsync failed", e);
  }
  ::close(fd);
}

// Fault hooks (checkpoint_io_testing.h), only in builds with test hooks.
#ifdef JOBFLOW_TEST_HOOKS
long g_crash_after = -1;      // set by testing::crash_after_files
long g_crash_countdown = -1;  // armed at the start of each save()
bool g_plain_rename = false;
void arm_crash_for_test() { g_crash_countdown = g_crash_after; }
void maybe_crash_for_test() {
  if (g_crash_countdown < 0) return;
  if (g_crash_countdown-- == 0) ::_exit(86);
}
bool plain_rename_for_test() { return g_plain_rename; }
#else
void arm_crash_for_test() {}
void maybe_crash_for_test() {}
bool plain_rename_for_test() { return false; }
#endif

void write_file(const std::string& path, const void* data, size_t n) {
  maybe_crash_for_test();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) sys_fail(kSave, path, "cannot create", errno);
  const auto* p = static_cast<const unsigned char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      sys_fail(kSave, path, "write failed", e);
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    sys_fail(kSave, path, "fsync failed", e);
  }
  if (::close(fd) != 0) sys_fail(kSave, path, "close failed", errno);
}

void make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) sys_fail(kSave, path, "cannot create folder", errno);
}

// True when `dir` has no entries.
bool dir_empty(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  return !ec && it == fs::directory_iterator();
}

// Siblings named <base><tag><pid>-<n> (tag ".tmp-" or ".old-"); returns pid
// or -1.
long sibling_pid(const std::string& name, const std::string& base, const std::string& tag) {
  const std::string prefix = base + tag;
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
  if (end == name.c_str() + prefix.size() || *end != '-' || pid <= 0) return -1;
  return pid;
}

bool process_gone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// After a successful save: delete tmp/old siblings left by crashed saves
// (only those whose process is gone, so a live save is never disturbed).
void remove_stale_siblings(const std::string& dir) {
  const std::string parent = parent_of(dir), base = base_of(dir);
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const char* tag : {".tmp-", ".old-"}) {
      const long pid = sibling_pid(name, base, tag);
      if (pid > 0 && process_gone(pid)) {
        std::error_code ec2;
        fs::remove_all(it->path(), ec2);
      }
    }
  }
}

std::string unique_sibling(const std::string& dir, const char* tag) {
  static std::atomic<uint64_t> counter{0};
  for (;;) {
    std::string p = dir + tag + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    if (!exists(p)) return p;
  }
}

// ----------------------------------------------------------- meta / dtype

const char* proto_dtype(DType t) {
  switch (t) {
    case DType::Float32: return "kFloat";
    case DType::Float64: return "kDouble";
    case DType::Int32: return "kInt32";
    case DType::Int64: return "kInt64";
    case DType::Int8: return "kInt8";
    case DType::UInt8: return "kUInt8";
    case DType::Bool: return "kBool";
    case DType::Int16: return "kInt16";
    case DType::UInt16: return "kUInt16";
    case DType::UInt32: return "kUInt32";
    case DType::UInt64: return "kUInt64";
    case DType::Float16: return "kFloat16";
    case DType::BFloat16: return "kBFloat16";
  }
  return "kInvalidDataType";
}

std::optional<DType> dtype_from_proto(const std::string& s) {
  static const std::pair<const char*, DType> names[] = {
      {"kChar", DType::Int8},   {"kFloat", DType::Float32}, {"kDouble", DType::Float64}, {"kInt8", DType::Int8},
      {"kInt32", DType::Int32}, {"kInt64", DType::Int64},   {"kUInt8", DType::UInt8}, {"kBool", DType::Bool},
      {"kFloat16", DType::Float16}, {"kBFloat16", DType::BFloat16}, {"kUInt16", DType::UInt16},
      {"kUInt32", DType::UInt32}, {"kUInt64", DType::UInt64}, {"kInt16", DType::Int16}};
  // OneFlow's DataType numbers (data_type.proto): kBool is 12, kFloat16 9,
  // kBFloat16 11, kUInt16..kUInt64 13..15, kInt16 17.
  static const char* numbers[] = {"1", "2", "3", "4", "5", "6", "7", "12", "9", "11", "13", "14", "15", "17"};
  static_assert(std::size(numbers) == std::size(names));
  for (size_t i = 0; i < std::size(names); ++i)
    if (s == names[i].first || s == numbers[i]) return names[i].second;
  return std::nullopt;
}

struct Meta {
  Shape shape;
  DType dtype;
};

// A small reader for the protobuf text format subset OneFlow writes:
// `shape { dim: N ... }` and `data_type: kX`; other fields (e.g. the
// `stride { ... }` of later versions) are skipped.
class MetaParser {
 public:
  MetaParser(const std::string& text, std::string where) : s_(text), where_(std::move(where)) {}

  Meta parse() {
    bool have_shape = false, have_type = false;
    Meta m{{}, DType::Float32};
    for (std::string field = next(); !field.empty(); field = next()) {
      if (field == "shape") {
        expect_open();
        m.shape.clear();
        for (std::string f = next(); f != "}"; f = next()) {
          if (f.empty()) bad("unterminated 'shape {'");
          if (f != "dim") bad("unexpected '" + f + "' in shape");
          expect(":");
          const std::string v = next();
          char* end = nullptr;
          errno = 0;
          const long long d = std::strtoll(v.c_str(), &end, 10);
          if (v.empty() || *end || errno || d < 0) bad("bad dim '" + v + "'");
          m.shape.push_back(d);
        }
        have_shape = true;
      } else if (field == "data_type") {
        expect(":");
        const std::string v = next();
        auto t = dtype_from_proto(v);
        if (!t) bad("unsupported data_type '" + v + "'");
        m.dtype = *t;
        have_type = true;
      } else if (field == "{" || field == "}" || field == ":") {
        bad("unexpected '" + field + "'");
      } else {
        skip_value();
      }
    }
    if (!have_shape) bad("no 'shape' field");
    if (!have_type) bad("no 'data_type' field");
    return m;
  }

 private:
  [[noreturn]] void bad(const std::string& what) { throw Error(where_ + "cannot parse meta: " + what); }

  // Next token: "{", "}", ":", a word, or "" at the end.
  std::string next() {
    for (;;) {
      while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (i_ < s_.size() && s_[i_] == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
        continue;
      }
      break;
    }
    if (i_ >= s_.size()) return "";
    const char c = s_[i_];
    if (c == '{' || c == '}' || c == ':' || c == '<' || c == '>') {
      ++i_;
      return std::string(1, c == '<' ? '{' : c == '>' ? '}' : c);
    }
    if (c == '"') {  // quoted string
      size_t j = i_ + 1;
      while (j < s_.size() && s_[j] != '"') j += (s_[j] == '\\') ? 2 : 1;
      std::string tok = s_.substr(i_, j + 1 - i_);
      i_ = j + 1;
      return tok;
    }
    size_t j = i_;
    while (j < s_.size() && !std::isspace(static_cast<unsigned char>(s_[j])) && !std::strchr("{}:<>#\"", s_[j])) ++j;
    std::string tok = s_.substr(i_, j - i_);
    i_ = j;
    return tok;
  }
  void expect(const char* tok) {
    const std::string t = next();
    if (t != tok) bad(std::string("expected '") + tok + "', got '" + t + "'");
  }
  // "shape {" or "shape: {"
  void expect_open() {
    std::string t = next();
    if (t == ":") t = next();
    if (t != "{") bad("expected '{' after 'shape', got '" + t + "'");
  }
  // Skips an unknown field's value: ": scalar" or "[:] { ... }".
  void skip_value() {
    std::string t = next();
    if (t == ":") t = next();
    if (t != "{") return;
    for (int depth = 1; depth > 0;) {
      t = next();
      if (t.empty()) bad("unterminated '{'");
      depth += (t == "{") - (t == "}");
    }
  }

  const std::string& s_;
  std::string where_;
  size_t i_ = 0;
};

std::string read_text(const std::string& path, const char* where) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) sys_fail(where, path, "cannot open", errno);
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      sys_fail(where, path, "read failed", e);
    }
    if (r == 0) break;
    s.append(buf, static_cast<size_t>(r));
    if (s.size() > (1u << 20)) {
      ::close(fd);
      throw Error(std::string(where) + path + ": meta file is implausibly large");
    }
  }
  ::close(fd);
  return s;
}

Meta read_meta(const std::string& vdir, const std::string& name, const char* where) {
  const std::string path = vdir + "/" + kMeta;
  return MetaParser(read_text(path, where), std::string(where) + path + ": variable '" + name + "': ").parse();
}

std::string describe(const Shape& s, DType t) { return shape_str(s) + " " + dtype_name(t); }

// Reads vdir/out into a new tensor after checking its size.
Tensor read_out(const std::string& dir, const std::string& vdir, const std::string& name, const Shape& shape,
                DType dtype, const char* where) {
  const std::string path = vdir + "/" + kOut;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) sys_fail(where, path, "variable '" + name + "': cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    sys_fail(where, path, "cannot stat", e);
  }
  int64_t bytes = 0;
  std::string why;
  if (!checked_nbytes(shape, dtype, &bytes, &why)) {  // the shape comes from `meta`, a file
    ::close(fd);
    throw Error(std::string(where) + dir + ": variable '" + name + "': " + describe(shape, dtype) + ": " + why);
  }
  const uint64_t want = static_cast<uint64_t>(bytes);
  const uint64_t have = static_cast<uint64_t>(st.st_size);
  if (have != want) {
    ::close(fd);
    throw Error(std::string(where) + dir + ": variable '" + name + "': " + path + " has " + std::to_string(have) +
                " bytes, expected " + std::to_string(want) + " bytes for " + describe(shape, dtype));
  }
  Tensor t(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.raw());
  size_t got = 0;
  while (got < want) {
    const ssize_t r = ::read(fd, p + got, want - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      sys_fail(where, path, "read failed", e);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  if (got != want)
    throw Error(std::string(where) + dir + ": variable '" + name + "': " + path + " shrank while reading (" +
                std::to_string(got) + " of " + std::to_string(want) + " bytes)");
  return t;
}

// The folder to read: `dir` itself, or — when it is missing because a save
// died between its two renames — the newest complete dir.old-* sibling.
std::string resolve_for_load(const std::string& dir_in, const char* where) {
  const std::string dir = normalize(where, dir_in);
  if (is_dir(dir)) {
    if (!is_file(dir + "/" + kDone))
      throw Error(std::string(where) + dir + " is not a complete checkpoint (no snapshot_done)");
    return dir;
  }
  if (exists(dir)) throw Error(std::string(where) + dir + " is not a folder");
  const std::string parent = parent_of(dir), base = base_of(dir);
  std::string best;
  struct timespec best_time {};
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (sibling_pid(name, base, ".old-") < 0) continue;
    const std::string cand = it->path().string();
    struct stat st;
    if (::stat((cand + "/" + kDone).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (best.empty() || st.st_mtim.tv_sec > best_time.tv_sec ||
        (st.st_mtim.tv_sec == best_time.tv_sec && st.st_mtim.tv_nsec > best_time.tv_nsec)) {
      best = cand;
      best_time = st.st_mtim;
    }
  }
  if (best.empty()) throw Error(std::string(where) + dir + " does not exist");
  return best;
}

}  // namespace

// ---------------------------------------------------------------- public

std::string meta_text(const Shape& shape, DType dtype) {
  std::string s = "shape {\n";
  for (int64_t d : shape) s += "  dim: " + std::to_string(d) + "\n";
  s += "}\ndata_type: ";
  s += proto_dtype(dtype);
  s += "\n";
  return s;
}

void save(const std::string& dir_in, const std::map<std::string, Tensor>& vars) {
  arm_crash_for_test();
  const std::string dir = normalize(kSave, dir_in);
  const std::string parent = parent_of(dir);

  // Refuse to replace anything that is not a checkpoint (or empty).
  struct stat st;
  const bool had_dir = exists(dir, &st);
  if (had_dir) {
    if (!S_ISDIR(st.st_mode)) throw Error(std::string(kSave) + dir + " exists and is not a folder");
    if (!is_file(dir + "/" + kDone) && !dir_empty(dir))
      throw Error(std::string(kSave) + dir +
                  " exists and is not a checkpoint (no snapshot_done); refusing to replace it");
  }
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error(std::string(kSave) + parent + ": cannot create folder: " + ec.message());

  // 1. Write the whole checkpoint into a fresh sibling folder.
  const std::string tmp = unique_sibling(dir, ".tmp-");
  make_dir(tmp);
  try {
    for (const auto& [name, t] : vars) {
      check_name(kSave, name);
      if (!t.defined()) throw Error(std::string(kSave) + "variable '" + name + "' is an empty Tensor");
      const std::string vdir = tmp + "/" + name;
      make_dir(vdir);
      write_file(vdir + "/" + kOut, t.raw(), t.nbytes());
      const std::string meta = meta_text(t.shape(), t.dtype());
      write_file(vdir + "/" + kMeta, meta.data(), meta.size());
      fsync_path(vdir, true);
    }
    write_file(tmp + "/" + kDone, nullptr, 0);  // last: marks it complete
    fsync_path(tmp, true);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }

  // 2. Swap it in.
  if (!had_dir) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      const int e = errno;
      fs::remove_all(tmp, ec);
      sys_fail(kSave, dir, "cannot rename " + tmp + " to it", e);
    }
    fsync_path(parent, true);
  } else {
    bool swapped = false;
#ifdef RENAME_EXCHANGE
    if (!plain_rename_for_test()) {
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
        swapped = true;
        fsync_path(parent, true);
        fs::remove_all(tmp, ec);  // tmp now holds the old checkpoint
        if (ec) {
          // Not fatal: the new checkpoint is in place; a later save cleans up.
        }
      } else if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != EOPNOTSUPP) {
        const int e = errno;
        fs::remove_all(tmp, ec);
        sys_fail(kSave, dir, "cannot exchange it with " + tmp, e);
      }
    }
#endif
    if (!swapped) {
      // Fallback: dir -> old, tmp -> dir. Between the two renames `dir` is
      // missing; load() then reads the complete `old` (see the header).
      const std::string old = unique_sibling(dir, ".old-");
      if (::rename(dir.c_str(), old.c_str()) != 0) {
        const int e = errno;
        fs::remove_all(tmp, ec);
        sys_fail(kSave, dir, "cannot rename it to " + old, e);
      }
      if (::rename(tmp.c_str(), dir.c_str()) != 0) {
        const int e = errno;
        ::rename(old.c_str(), dir.c_str());  // put the old one back
        fs::remove_all(tmp, ec);
        sys_fail(kSave, dir, "cannot rename " + tmp + " to it", e);
      }
      fsync_path(parent, true);
      fs::remove_all(old, ec);
    }
  }
  fsync_path(parent, true);
  remove_stale_siblings(dir);
}

Contents load_any(const std::string& dir_in, const SpecOf& spec_of) {
  const std::string dir = resolve_for_load(dir_in, kLoad);
  Contents out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw Error(std::string(kLoad) + dir + ": cannot list: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(std::string(kLoad) + dir + ": cannot list: " + ec.message());
    const std::string name = it->path().filename().string();
    const std::string vdir = it->path().string();
    if (!is_dir(vdir) || !is_file(vdir + "/" + kOut)) continue;  // not a variable
    if (is_file(vdir + "/" + kMeta)) {
      const Meta m = read_meta(vdir, name, kLoad);
      out.typed.emplace(name, read_out(dir, vdir, name, m.shape, m.dtype, kLoad));
      continue;
    }
    // OneFlow 0.2/0.3: `out` only. The job's definition gives the spec.
    std::optional<std::pair<Shape, DType>> spec;
    if (spec_of) spec = spec_of(name);
    if (spec) {
      out.typed.emplace(name, read_out(dir, vdir, name, spec->first, spec->second, kLoad));
      continue;
    }
    if (!spec_of)
      throw Error(std::string(kLoad) + dir + ": variable '" + name + "' has no meta file (" + vdir +
                  "/meta); use load_variable() with the expected shape and dtype");
    struct stat st;
    if (::stat((vdir + "/" + kOut).c_str(), &st) != 0) sys_fail(kLoad, vdir + "/" + kOut, "cannot stat", errno);
    const auto bytes = static_cast<int64_t>(st.st_size);
    out.untyped.emplace(name, read_out(dir, vdir, name, Shape{bytes}, DType::UInt8, kLoad));
  }
  return out;
}

std::map<std::string, Tensor> load(const std::string& dir) { return load_any(dir, nullptr).typed; }

Tensor load_variable(const std::string& dir_in, const std::string& name, const Shape& expect_shape,
                     DType expect_dtype) {
  check_name(kLoadVar, name);
  for (int64_t d : expect_shape)
    if (d < 0) throw Error(std::string(kLoadVar) + "expected shape " + shape_str(expect_shape) + " is negative");
  const std::string dir = resolve_for_load(dir_in, kLoadVar);
  const std::string vdir = dir + "/" + name;
  if (!is_file(vdir + "/" + kOut))
    throw Error(std::string(kLoadVar) + dir + ": no variable '" + name + "' (" + vdir + "/out not found)");
  if (is_file(vdir + "/" + kMeta)) {
    const Meta m = read_meta(vdir, name, kLoadVar);
    if (m.shape != expect_shape || m.dtype != expect_dtype)
      throw Error(std::string(kLoadVar) + dir + ": variable '" + name + "': meta says " +
                  describe(m.shape, m.dtype) + ", expected " + describe(expect_shape, expect_dtype));
  }
  return read_out(dir, vdir, name, expect_shape, expect_dtype, kLoadVar);
}

#ifdef JOBFLOW_TEST_HOOKS
namespace testing {
void crash_after_files(long files) { g_crash_after = files; }
void force_plain_rename(bool on) { g_plain_rename = on; }
}  // namespace testing
#endif

}  // namespace jobflow::checkpoint_io
