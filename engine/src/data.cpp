// jobflow/data.cpp — IDX reader and the (Fashion-)MNIST loader.
//
// Reading strategy (it must be fast: 60k images in well under a second):
//  * plain files: read the header, validate it against the file size, then
//    read() the payload straight into the tensor's buffer and byte-swap in
//    place;
//  * gzip files: read the compressed bytes into memory, inflate the header,
//    validate it, compare the expected size with the gzip trailer (ISIZE),
//    then inflate straight into the tensor's buffer. When the trailer does
//    not match (truncated or multi-member file) a counting pass that
//    allocates nothing finds the real uncompressed size first, so bogus dims
//    never cause a big allocation.
#include "jobflow/data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <array>
#include <random>
#include <future>
#include <limits>

namespace jobflow::data {
namespace {

// ---------------------------------------------------------------- helpers

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("[read_idx] " + path + ": " + what);
}

std::string errno_text(int e) { return std::strerror(e); }

std::string hex(uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", width, v);
  return buf;
}

// RAII file descriptor.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to n bytes (fewer only at end of file).
size_t read_full(int fd, void* dst, size_t n, const std::string& path) {
  auto* p = static_cast<unsigned char*>(dst);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(path, "read failed: " + errno_text(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// What the IDX header says.
struct Header {
  uint8_t type = 0;        // IDX type code
  size_t elem = 0;         // bytes per element in the file
  DType dtype = DType::UInt8;  // dtype of the returned tensor
  Shape shape;
  uint64_t header_bytes = 0;   // 4 + 4 * rank
  uint64_t payload_bytes = 0;  // numel * elem
  uint64_t total() const { return header_bytes + payload_bytes; }
};

// Validates the 4 magic bytes; returns the rank.
int check_magic(const unsigned char m[4], Header& h, const std::string& path) {
  const uint32_t magic = be32(m);
  if (m[0] != 0 || m[1] != 0)
    fail(path, "bad magic " + hex(magic, 8) +
                   " (an IDX file starts with two zero bytes, a type code and the rank, e.g. 0x00000803)");
  h.type = m[2];
  switch (h.type) {
    case 0x08: h.elem = 1; h.dtype = DType::UInt8; break;
    case 0x09: h.elem = 1; h.dtype = DType::Int8; break;
    case 0x0B: h.elem = 2; h.dtype = DType::Int32; break;  // int16, widened
    case 0x0C: h.elem = 4; h.dtype = DType::Int32; break;
    case 0x0D: h.elem = 4; h.dtype = DType::Float32; break;
    case 0x0E: h.elem = 8; h.dtype = DType::Float64; break;
    default:
      fail(path, "bad magic " + hex(magic, 8) + ": unknown element type code " + hex(h.type, 2) +
                     " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)");
  }
  const int rank = m[3];
  if (rank < 1 || rank > 8)
    fail(path, "bad magic " + hex(magic, 8) + ": rank " + std::to_string(rank) + " is out of range 1..8");
  h.header_bytes = 4 + 4 * static_cast<uint64_t>(rank);
  return rank;
}

// Parses the dims and computes the payload size, rejecting overflow.
void parse_dims(const unsigned char* d, int rank, Header& h, const std::string& path) {
  h.shape.resize(rank);
  for (int i = 0; i < rank; ++i) h.shape[i] = be32(d + 4 * i);
  // Both the bytes in the file and those of the tensor (int16 widens) must fit.
  int64_t n = 0, payload = 0, tensor_bytes = 0;
  std::string why = "the byte size overflows 64 bits";
  if (!checked_numel(h.shape, &n, &why) || !size_mul(n, static_cast<int64_t>(h.elem), &payload) ||
      !checked_nbytes(h.shape, h.dtype, &tensor_bytes, &why))
    fail(path, "dims " + shape_str(h.shape) + " are too large: " + why);
  h.payload_bytes = static_cast<uint64_t>(payload);
}

// Converts the big-endian payload in `raw` (already in the tensor's buffer
// for every type except int16) to host order.
void to_host_order(const Header& h, Tensor& t, const unsigned char* int16_src) {
  const int64_t n = t.numel();
  if (h.type == 0x0B) {
    int32_t* dst = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<int16_t>((uint16_t(int16_src[2 * i]) << 8) | int16_src[2 * i + 1]);
    return;
  }
  if (h.elem == 4) {
    auto* p = static_cast<uint32_t*>(t.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = __builtin_bswap32(p[i]);
  } else if (h.elem == 8) {
    auto* p = static_cast<uint64_t*>(t.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = __builtin_bswap64(p[i]);
  }
}

// Where the payload bytes go: the tensor itself, or a scratch buffer for
// int16 (widened afterwards).
struct Dest {
  Tensor t;
  std::vector<unsigned char> int16_buf;
  unsigned char* ptr = nullptr;
};

Dest make_dest(const Header& h) {
  Dest d;
  d.t = Tensor(h.shape, h.dtype);
  if (h.type == 0x0B) {
    d.int16_buf.resize(h.payload_bytes);
    d.ptr = d.int16_buf.data();
  } else {
    d.ptr = static_cast<unsigned char*>(d.t.raw());
  }
  return d;
}

// ------------------------------------------------------------------ plain

Tensor read_plain(int fd, uint64_t file_size, const std::string& path) {
  Header h;
  unsigned char m[4];
  if (read_full(fd, m, 4, path) < 4)
    fail(path, "truncated file: expected at least 4 bytes (the magic), got " + std::to_string(file_size));
  const int rank = check_magic(m, h, path);
  unsigned char dims[32];
  if (file_size < h.header_bytes || read_full(fd, dims, 4 * rank, path) < size_t(4 * rank))
    fail(path, "truncated file: expected " + std::to_string(h.header_bytes) + " header bytes, got " +
                   std::to_string(file_size));
  parse_dims(dims, rank, h, path);
  if (file_size < h.total())
    fail(path, "truncated file: expected " + std::to_string(h.total()) + " bytes for dims " +
                   shape_str(h.shape) + ", got " + std::to_string(file_size));
  if (file_size > h.total())
    fail(path, "file has " + std::to_string(file_size) + " bytes, expected " + std::to_string(h.total()) +
                   " for dims " + shape_str(h.shape) + " (trailing data)");
  Dest d = make_dest(h);
  const size_t got = read_full(fd, d.ptr, h.payload_bytes, path);
  if (got != h.payload_bytes)  // the file shrank under us
    fail(path, "truncated file: expected " + std::to_string(h.total()) + " bytes, got " +
                   std::to_string(h.header_bytes + got));
  to_host_order(h, d.t, d.ptr);
  return d.t;
}

// ------------------------------------------------------------------- gzip

// Inflates a gzip buffer on demand (handles concatenated members).
class Inflater {
 public:
  Inflater(const unsigned char* data, size_t size, const std::string& path) : path_(path) {
    std::memset(&z_, 0, sizeof z_);
    if (inflateInit2(&z_, 15 + 16) != Z_OK) fail(path, "zlib inflateInit2 failed");
    z_.next_in = const_cast<unsigned char*>(data);
    z_.avail_in = 0;
    rest_ = size;
    refill();
  }
  ~Inflater() { inflateEnd(&z_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Fills up to n bytes; returns how many (fewer only at the end of the
  // data). `expected` is the total uncompressed size, for error messages.
  size_t read(unsigned char* dst, size_t n, uint64_t expected) {
    size_t got = 0;
    while (got < n && !eof_) {
      const size_t chunk = std::min<size_t>(n - got, 1u << 30);
      z_.next_out = dst + got;
      z_.avail_out = static_cast<uInt>(chunk);
      refill();
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t made = chunk - z_.avail_out;
      got += made;
      produced_ += made;
      if (rc == Z_STREAM_END) {
        // Another gzip member may follow (concatenated .gz files).
        refill();
        if (z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b) {
          inflateReset(&z_);
        } else {
          eof_ = true;
        }
      } else if (rc == Z_BUF_ERROR && z_.avail_in == 0 && rest_ == 0) {
        // Input exhausted before the stream ended.
        fail(path_, "truncated file: expected " + std::to_string(expected) + " bytes, got " +
                        std::to_string(produced_) + " (uncompressed; the gzip stream is cut short)");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail(path_, std::string("corrupt gzip data (") + (z_.msg ? z_.msg : zError(rc)) + ") after " +
                        std::to_string(produced_) + " uncompressed bytes");
      }
    }
    return got;
  }
  uint64_t produced() const { return produced_; }
  bool eof() const { return eof_; }

 private:
  // zlib's avail_in is 32-bit: feed big buffers in slices.
  void refill() {
    if (z_.avail_in == 0 && rest_ > 0) {
      const size_t take = std::min<size_t>(rest_, 1u << 30);
      z_.avail_in = static_cast<uInt>(take);
      rest_ -= take;
    }
  }
  z_stream z_;
  size_t rest_ = 0;  // input bytes not yet handed to zlib
  uint64_t produced_ = 0;
  bool eof_ = false;
  std::string path_;
};

Tensor read_gzip(int fd, uint64_t file_size, const std::string& path) {
  std::vector<unsigned char> comp(file_size);
  if (read_full(fd, comp.data(), file_size, path) != file_size) fail(path, "file shrank while reading");

  Header h;
  Inflater z(comp.data(), comp.size(), path);
  unsigned char m[4];
  if (z.read(m, 4, 4) < 4)
    fail(path, "truncated file: expected at least 4 bytes (the magic), got " + std::to_string(z.produced()) +
                   " (uncompressed)");
  const int rank = check_magic(m, h, path);
  unsigned char dims[32];
  if (z.read(dims, 4 * rank, h.header_bytes) < size_t(4 * rank))
    fail(path, "truncated file: expected " + std::to_string(h.header_bytes) + " header bytes, got " +
                   std::to_string(z.produced()) + " (uncompressed)");
  parse_dims(dims, rank, h, path);

  // The gzip trailer's ISIZE is the uncompressed size mod 2^32 (of the last
  // member). When it disagrees, count the real size without allocating.
  const uint32_t isize = comp.size() >= 18 ? (uint32_t(comp[comp.size() - 4]) | uint32_t(comp[comp.size() - 3]) << 8 |
                                              uint32_t(comp[comp.size() - 2]) << 16 |
                                              uint32_t(comp[comp.size() - 1]) << 24)
                                           : 0;
  if (isize != static_cast<uint32_t>(h.total())) {
    Inflater c(comp.data(), comp.size(), path);
    std::vector<unsigned char> scratch(1 << 16);
    while (!c.eof() && c.produced() <= h.total()) c.read(scratch.data(), scratch.size(), h.total());
    if (c.produced() < h.total())
      fail(path, "truncated file: expected " + std::to_string(h.total()) + " bytes for dims " +
                     shape_str(h.shape) + ", got " + std::to_string(c.produced()) + " (uncompressed)");
    if (c.produced() > h.total())
      fail(path, "file has more than " + std::to_string(h.total()) + " bytes (uncompressed), expected " +
                     std::to_string(h.total()) + " for dims " + shape_str(h.shape) + " (trailing data)");
  }

  Dest d = make_dest(h);
  const size_t got = z.read(d.ptr, h.payload_bytes, h.total());
  if (got != h.payload_bytes)
    fail(path, "truncated file: expected " + std::to_string(h.total()) + " bytes for dims " +
                   shape_str(h.shape) + ", got " + std::to_string(z.produced()) + " (uncompressed)");
  unsigned char extra;
  if (z.read(&extra, 1, h.total()) != 0)
    fail(path, "file has more than " + std::to_string(h.total()) + " bytes (uncompressed), expected " +
                   std::to_string(h.total()) + " for dims " + shape_str(h.shape) + " (trailing data)");
  to_host_order(h, d.t, d.ptr);
  return d.t;
}

// ------------------------------------------------------------------ mnist

const char* kInstallHint = "install it with: apt-get install dataset-fashion-mnist";

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string find_file(const std::string& dir, const std::string& base) {
  const std::string plain = dir + "/" + base;
  if (is_file(plain)) return plain;
  if (is_file(plain + ".gz")) return plain + ".gz";
  throw Error("[load_mnist] " + plain + "[.gz] not found; " + kInstallHint);
}

// Cuts (N, H, W) uint8 images and (N,) uint8 labels into full batches.
/* The checks of make_batches: uint8 (N, H, W) images, (N,) labels, a batch
 * no larger than N. */
void check_split(const Tensor& images, const Tensor& labels, int64_t batch, const char* split,
                 const std::string& ipath, const std::string& lpath) {
  if (images.dtype() != DType::UInt8 || images.ndim() != 3)
    throw Error("[load_mnist] " + ipath + ": expected (N, H, W) unsigned bytes, got " +
                shape_str(images.shape()) + " " + dtype_name(images.dtype()));
  if (labels.dtype() != DType::UInt8 || labels.ndim() != 1)
    throw Error("[load_mnist] " + lpath + ": expected (N,) unsigned bytes, got " + shape_str(labels.shape()) +
                " " + dtype_name(labels.dtype()));
  const int64_t n = images.dim(0);
  if (labels.dim(0) != n)
    throw Error("[load_mnist] " + ipath + " has " + std::to_string(n) + " images but " + lpath + " has " +
                std::to_string(labels.dim(0)) + " labels");
  if (batch > n)
    throw Error(std::string("[load_mnist] ") + split + " batch size " + std::to_string(batch) +
                " is larger than the " + std::to_string(n) + " " + split + " samples");
}

Dataset make_batches(const Tensor& images, const Tensor& labels, int64_t batch, const char* split,
                     const std::string& ipath, const std::string& lpath) {
  check_split(images, labels, batch, split, ipath, lpath);
  const int64_t n = images.dim(0), h = images.dim(1), w = images.dim(2);
  const int64_t nb = n / batch, per = h * w;
  Dataset ds;
  ds.images.reserve(nb);
  ds.labels.reserve(nb);
  const uint8_t* px = images.data<uint8_t>();
  const uint8_t* lb = labels.data<uint8_t>();
  for (int64_t b = 0; b < nb; ++b) {
    Tensor img({batch, 1, h, w}, DType::Float32);
    float* dst = img.data<float>();
    const uint8_t* src = px + b * batch * per;
    // x.astype(float32) / 255.0 — a float32 division, as numpy does it.
    for (int64_t i = 0; i < batch * per; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
    Tensor lab({batch}, DType::Int32);
    int32_t* ld = lab.data<int32_t>();
    for (int64_t i = 0; i < batch; ++i) ld[i] = lb[b * batch + i];
    ds.images.push_back(std::move(img));
    ds.labels.push_back(std::move(lab));
  }
  return ds;
}

}  // namespace

// ------------------------------------------------------------------ public

Tensor read_idx(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) fail(path, "cannot open: " + errno_text(errno));
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail(path, "cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char m[2] = {0, 0};
  const size_t got = read_full(f.fd, m, 2, path);
  if (::lseek(f.fd, 0, SEEK_SET) != 0) fail(path, "cannot seek: " + errno_text(errno));
  if (got == 2 && m[0] == 0x1f && m[1] == 0x8b) return read_gzip(f.fd, size, path);
  return read_plain(f.fd, size, path);
}

// ------------------------------------------------------------------ .npy

namespace {

[[noreturn]] void npy_fail(const char* where, const std::string& path, const std::string& what) {
  throw Error(std::string("[") + where + "] " + path + ": " + what);
}

// The value of `key` in the header's Python dict literal ("{'descr': '<f4',
// 'fortran_order': False, 'shape': (2, 3), }"), as text.
std::string header_value(const std::string& h, const std::string& key, const std::string& path, const char* who) {
  const std::string k = "'" + key + "'";
  size_t p = h.find(k);
  if (p == std::string::npos) npy_fail(who, path, "the header has no " + k);
  p = h.find(':', p + k.size());
  if (p == std::string::npos) npy_fail(who, path, "the header's " + k + " has no value");
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p >= h.size()) npy_fail(who, path, "the header's " + k + " has no value");
  size_t e = p;
  if (h[p] == '\'') {
    e = h.find('\'', p + 1);
    if (e == std::string::npos) npy_fail(who, path, "unterminated string in the header");
    return h.substr(p + 1, e - p - 1);
  }
  if (h[p] == '(') {
    e = h.find(')', p);
    if (e == std::string::npos) npy_fail(who, path, "unterminated shape in the header");
    return h.substr(p, e - p + 1);
  }
  while (e < h.size() && h[e] != ',' && h[e] != '}') ++e;
  return h.substr(p, e - p);
}

}  // namespace

namespace {

// A .npy file's header, read and checked (`who`: read_npy or
// read_npy_strings); the file is left at the start of the data.
struct NpyHead {
  std::string descr, shape_text;
  Shape shape;
  uint64_t size = 0, pos = 0, hlen = 0;  // file size, header start and length
};
NpyHead npy_head(int fd, const std::string& path, const char* who) {
  NpyHead r;
  struct stat st;
  if (::fstat(fd, &st) != 0) npy_fail(who, path, "cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) npy_fail(who, path, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char pre[12] = {};
  if (size < 10 || read_full(fd, pre, 10, path) != 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0)
    npy_fail(who, path, "not a .npy file (no \\x93NUMPY magic)");
  const int major = pre[6];
  uint64_t hlen = 0, pos = 10;
  if (major == 1) {
    hlen = pre[8] | (pre[9] << 8);
  } else if (major == 2 || major == 3) {
    if (size < 12 || read_full(fd, pre + 10, 2, path) != 2) npy_fail(who, path, "truncated header");
    hlen = static_cast<uint64_t>(pre[8]) | (static_cast<uint64_t>(pre[9]) << 8) | (static_cast<uint64_t>(pre[10]) << 16) |
           (static_cast<uint64_t>(pre[11]) << 24);
    pos = 12;
  } else {
    npy_fail(who, path, "format version " + std::to_string(major) + " is not 1, 2 or 3");
  }
  if (hlen > 1 << 20 || pos + hlen > size) npy_fail(who, path, "truncated or oversized header");
  std::string h(static_cast<size_t>(hlen), '\0');
  if (read_full(fd, h.data(), h.size(), path) != h.size()) npy_fail(who, path, "truncated header");
  r.descr = header_value(h, "descr", path, who);
  const std::string fortran = header_value(h, "fortran_order", path, who);
  r.shape_text = header_value(h, "shape", path, who);
  const std::string& shape_text = r.shape_text;
  if (fortran.find("True") != std::string::npos)
    npy_fail(who, path, "the array is in Fortran order; save it with numpy.ascontiguousarray");
  Shape& shape = r.shape;
  {
    std::string t = shape_text.substr(1, shape_text.size() - 2);  // without the parentheses
    size_t i = 0;
    while (i < t.size()) {
      while (i < t.size() && (t[i] == ' ' || t[i] == ',')) ++i;
      if (i >= t.size()) break;
      size_t used = 0;
      long long d = 0;
      try {
        d = std::stoll(t.substr(i), &used);
      } catch (...) {
        npy_fail(who, path, "bad shape " + shape_text);
      }
      if (d < 0 || used == 0) npy_fail(who, path, "bad shape " + shape_text);
      shape.push_back(d);
      i += used;
    }
  }
  if (shape.size() > 8) npy_fail(who, path, "rank " + std::to_string(shape.size()) + " is over 8");
  r.size = size;
  r.pos = pos;
  r.hlen = hlen;
  return r;
}

}  // namespace

Tensor read_npy(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) npy_fail("read_npy", path, "cannot open: " + errno_text(errno));
  const NpyHead hd = npy_head(f.fd, path, "read_npy");
  const std::string& descr = hd.descr;
  const std::string& shape_text = hd.shape_text;
  const Shape& shape = hd.shape;
  const uint64_t size = hd.size, pos = hd.pos, hlen = hd.hlen;
  if (descr.size() >= 3 && (descr[1] == 'U' || descr[1] == 'S'))
    npy_fail("read_npy", path, "element type '" + descr + "' holds strings; a job takes them as a string tensor " +
                                   "(jobflow run does, data::read_npy_strings reads them)");
  struct Kind {
    const char* code;
    DType dtype;
  };
  static const Kind kinds[] = {{"f4", DType::Float32}, {"f8", DType::Float64}, {"i4", DType::Int32},
                               {"i8", DType::Int64},   {"i1", DType::Int8},    {"u1", DType::UInt8},
                               {"b1", DType::Bool},    {"i2", DType::Int16},   {"u2", DType::UInt16},
                               {"u4", DType::UInt32},  {"u8", DType::UInt64},  {"f2", DType::Float16}};
  if (descr.size() != 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '='))
    npy_fail("read_npy", path, "element type '" + descr + "' is not little-endian " +
                                   "float16/32/64, int8/16/32/64, uint8/16/32/64 or bool");
  const Kind* kind = nullptr;
  for (const Kind& k : kinds)
    if (descr.substr(1) == k.code) kind = &k;
  if (!kind)
    npy_fail("read_npy", path, "element type '" + descr + "' is not float16/32/64, int8/16/32/64, uint8/16/32/64 or bool");
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d))
      npy_fail("read_npy", path, "shape " + shape_text + " is too large");
    else
      n *= static_cast<uint64_t>(d);
  const uint64_t bytes = n * dtype_size(kind->dtype);
  if (size - pos - hlen < bytes)
    npy_fail("read_npy", path, "truncated file: " + shape_text + " " + descr + " needs " + std::to_string(bytes) +
                                   " bytes of data, the file has " + std::to_string(size - pos - hlen));
  Tensor t(shape, kind->dtype);
  if (bytes && read_full(f.fd, t.raw(), static_cast<size_t>(bytes), path) != bytes)
    npy_fail("read_npy", path, "truncated file");
  if (descr.substr(1) == "b1") {  // bool: any nonzero byte is true
    auto* p = static_cast<uint8_t*>(t.raw());
    for (uint64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
  }
  return t;
}

namespace {

// Writes a .npy file of `shape` with element type `code` and `data`
// (row-major), atomically.
void write_npy_file(const char* who, const std::string& path, const std::string& code, const Shape& dims,
                    const void* data, size_t nbytes) {
  std::string shape = "(";  // Python's tuple: (), (3,), (2, 3)
  for (size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
  shape += dims.size() == 1 ? ",)" : ")";
  std::string h = "{'descr': '" + code + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Header padded with spaces so the data starts at a multiple of 64, then '\n'.
  const size_t total = (10 + h.size() + 1 + 63) / 64 * 64;
  h.append(total - 10 - h.size() - 1, ' ');
  h += '\n';
  std::string pre("\x93NUMPY\x01\x00", 8);
  pre += static_cast<char>(h.size() & 0xff);
  pre += static_cast<char>((h.size() >> 8) & 0xff);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) npy_fail(who, path, "cannot create " + tmp + ": " + errno_text(errno));
  bool ok = std::fwrite(pre.data(), 1, pre.size(), f) == pre.size() && std::fwrite(h.data(), 1, h.size(), f) == h.size() &&
            (nbytes == 0 || std::fwrite(data, 1, nbytes, f) == nbytes);
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    npy_fail(who, path, "cannot write: " + errno_text(e));
  }
}

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  const char* code = nullptr;
  switch (t.dtype()) {
    case DType::Float32: code = "<f4"; break;
    case DType::Float64: code = "<f8"; break;
    case DType::Int32: code = "<i4"; break;
    case DType::Int64: code = "<i8"; break;
    case DType::Int8: code = "|i1"; break;
    case DType::UInt8: code = "|u1"; break;
    case DType::Bool: code = "|b1"; break;
    case DType::Int16: code = "<i2"; break;
    case DType::UInt16: code = "<u2"; break;
    case DType::UInt32: code = "<u4"; break;
    case DType::UInt64: code = "<u8"; break;
    case DType::Float16: code = "<f2"; break;
    case DType::BFloat16:  // NumPy has no bfloat16 (ml_dtypes' is a void type to NumPy's files)
      npy_fail("write_npy", path, "bfloat16 has no .npy element type; cast to float32 first");
  }
  write_npy_file("write_npy", path, code, t.shape(), t.raw(), t.nbytes());
}

UnpackedStrings read_npy_strings(const std::string& path) {
  const char* who = "read_npy_strings";
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) npy_fail(who, path, "cannot open: " + errno_text(errno));
  const NpyHead hd = npy_head(f.fd, path, who);
  const std::string& d = hd.descr;
  // <Un: n UTF-32 code units per element; |Sn: n bytes; NULs at the end are
  // padding (NumPy's own reading).
  const bool wide = d.size() >= 3 && (d[0] == '<' || d[0] == '|' || d[0] == '=') && d[1] == 'U';
  const bool bytes = d.size() >= 3 && (d[0] == '|' || d[0] == '<' || d[0] == '=') && d[1] == 'S';
  if ((!wide && !bytes) || d.find_first_not_of("0123456789", 2) != std::string::npos || d.size() > 12)
    npy_fail(who, path, "element type '" + d + "' is not strings (<U or |S)");
  const uint64_t width = std::stoull(d.substr(2)), unit = wide ? 4 : 1;
  uint64_t n = 1;
  for (int64_t k : hd.shape)
    if (k != 0 && n > std::numeric_limits<uint64_t>::max() / 4 / (width + 1) / static_cast<uint64_t>(k))
      npy_fail(who, path, "shape " + hd.shape_text + " is too large");
    else
      n *= static_cast<uint64_t>(k);
  // Empty strings take no bytes in the file but a length each when packed:
  // a huge count of them is refused rather than allocated.
  if (width == 0 && n > (uint64_t{1} << 20))
    npy_fail(who, path, "element type '" + d + "' (empty strings) with " + std::to_string(n) +
                            " elements: refused (more than 2^20 empty strings)");
  const uint64_t total = n * width * unit;
  if (hd.size - hd.pos - hd.hlen < total)
    npy_fail(who, path, "truncated file: " + hd.shape_text + " " + d + " needs " + std::to_string(total) + " bytes");
  std::string raw(static_cast<size_t>(total), '\0');
  if (total && read_full(f.fd, raw.data(), raw.size(), path) != total) npy_fail(who, path, "truncated file");
  UnpackedStrings u;
  u.shape = hd.shape;
  u.items.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    const char* e = raw.data() + i * width * unit;
    if (bytes) {
      size_t len = static_cast<size_t>(width);
      while (len > 0 && e[len - 1] == '\0') --len;
      u.items.emplace_back(e, len);
      continue;
    }
    std::u32string cps;
    for (uint64_t k = 0; k < width; ++k) {
      uint32_t c;
      std::memcpy(&c, e + k * 4, 4);
      cps.push_back(static_cast<char32_t>(c));
    }
    while (!cps.empty() && cps.back() == 0) cps.pop_back();
    for (char32_t c : cps)
      if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
        char cp[16];
        std::snprintf(cp, sizeof cp, "U+%04X", static_cast<unsigned>(c));
        npy_fail(who, path, "element " + std::to_string(i) + " holds " + cp + ", not a Unicode character");
      }
    u.items.push_back(utf8_encode(cps));
  }
  return u;
}

void write_npy_strings(const std::string& path, const UnpackedStrings& s) {
  int64_t n = 0;
  if (!checked_numel(s.shape, &n) || n != static_cast<int64_t>(s.items.size()))
    npy_fail("write_npy_strings", path, std::to_string(s.items.size()) + " strings for shape " + shape_str(s.shape));
  // <Un when every string is UTF-8 (NumPy's str), else |Sn (bytes).
  std::vector<std::u32string> wide(s.items.size());
  bool utf8 = true;
  size_t width = 1;
  for (size_t i = 0; i < s.items.size() && utf8; ++i) {
    size_t bad = 0;
    utf8 = utf8_decode(s.items[i], &wide[i], &bad);
    width = std::max(width, wide[i].size());
  }
  std::string data;
  if (utf8) {
    data.assign(s.items.size() * width * 4, '\0');
    for (size_t i = 0; i < wide.size(); ++i)
      for (size_t k = 0; k < wide[i].size(); ++k) {
        const uint32_t c = wide[i][k];
        std::memcpy(data.data() + (i * width + k) * 4, &c, 4);
      }
  } else {
    width = 1;
    for (const std::string& t : s.items) width = std::max(width, t.size());
    data.assign(s.items.size() * width, '\0');
    for (size_t i = 0; i < s.items.size(); ++i)
      if (!s.items[i].empty()) std::memcpy(data.data() + i * width, s.items[i].data(), s.items[i].size());
  }
  write_npy_file("write_npy_strings", path, (utf8 ? "<U" : "|S") + std::to_string(width), s.shape, data.data(),
                 data.size());
}

std::string default_mnist_dir() {
  const char* env = std::getenv("JOBFLOW_DATA");
  if (env && *env) return env;
  return "/usr/share/datasets/fashion-mnist";
}

namespace {

/* load_mnist's checks and the four files' paths. */
std::array<std::string, 4> mnist_files(int64_t train_batch, int64_t& test_batch, const std::string& dir_in,
                                       const char* where) {
  if (test_batch == 0) test_batch = train_batch;
  if (train_batch <= 0 || test_batch < 0)
    throw Error(std::string("[") + where + "] batch sizes must be positive, got train_batch=" +
                std::to_string(train_batch) + " test_batch=" + std::to_string(test_batch));
  const std::string dir = dir_in.empty() ? default_mnist_dir() : dir_in;
  if (!is_dir(dir)) throw Error(std::string("[") + where + "] " + dir + " does not exist; " + kInstallHint);
  return {find_file(dir, "train-images-idx3-ubyte"), find_file(dir, "train-labels-idx1-ubyte"),
          find_file(dir, "t10k-images-idx3-ubyte"), find_file(dir, "t10k-labels-idx1-ubyte")};
}

}  // namespace

Mnist load_mnist(int64_t train_batch, int64_t test_batch, const std::string& dir_in) {
  const std::array<std::string, 4> paths = mnist_files(train_batch, test_batch, dir_in, "load_mnist");
  // Decode the two image files in parallel (they are >99% of the work), and
  // batch each split as soon as its files are read.
  auto split = [&](int k, int64_t batch, const char* name) {
    Tensor labels = read_idx(paths[k + 1]);
    Tensor images = read_idx(paths[k]);
    return make_batches(images, labels, batch, name, paths[k], paths[k + 1]);
  };
  auto test = std::async(std::launch::async, split, 2, test_batch, "test");
  Mnist out;
  out.train = split(0, train_batch, "train");
  out.test = test.get();
  return out;
}

RawMnist load_mnist_raw(int64_t train_batch, int64_t test_batch, const std::string& dir_in) {
  const std::array<std::string, 4> paths = mnist_files(train_batch, test_batch, dir_in, "load_mnist");
  auto split = [&](int k, int64_t batch, const char* name) {
    RawSplit r;
    r.labels = read_idx(paths[k + 1]);
    r.images = read_idx(paths[k]);
    check_split(r.images, r.labels, batch, name, paths[k], paths[k + 1]);
    r.batch_size = batch;
    return r;
  };
  auto test = std::async(std::launch::async, split, 2, test_batch, "test");
  RawMnist out;
  out.train = split(0, train_batch, "train");
  out.test = test.get();
  return out;
}

int64_t RawSplit::batches() const { return batch_size > 0 && images.ndim() == 3 ? images.dim(0) / batch_size : 0; }

std::pair<Tensor, Tensor> RawSplit::batch(int64_t i, const std::vector<int64_t>& order) const {
  const int64_t nb = batches();
  if (i < 0 || i >= nb)
    throw Error("[RawSplit::batch] batch " + std::to_string(i) + " of " + std::to_string(nb));
  if (!order.empty() && static_cast<int64_t>(order.size()) != samples())
    throw Error("[RawSplit::batch] an order of " + std::to_string(order.size()) + " samples for " +
                std::to_string(samples()));
  const int64_t B = batch_size, h = images.dim(1), w = images.dim(2), per = h * w;
  Tensor img({B, 1, h, w}, DType::Float32);
  Tensor lab({B}, DType::Int32);
  float* dst = img.data<float>();
  int32_t* ld = lab.data<int32_t>();
  const uint8_t* px = images.data<uint8_t>();
  const uint8_t* lb = labels.data<uint8_t>();
  for (int64_t k = 0; k < B; ++k) {
    const int64_t src = order.empty() ? i * B + k : order[static_cast<size_t>(i * B + k)];
    if (src < 0 || src >= samples())
      throw Error("[RawSplit::batch] sample " + std::to_string(src) + " of " + std::to_string(samples()));
    const uint8_t* s = px + src * per;
    // x.astype(float32) / 255.0 — as make_batches.
    for (int64_t p = 0; p < per; ++p) dst[k * per + p] = static_cast<float>(s[p]) / 255.0f;
    ld[k] = lb[src];
  }
  return {std::move(img), std::move(lab)};
}

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

Dataset shuffled(const Dataset& d, uint64_t seed) {
  if (d.images.size() != d.labels.size())
    throw Error("[data::shuffled] " + std::to_string(d.images.size()) + " image batches but " +
                std::to_string(d.labels.size()) + " label batches");
  if (d.images.empty()) return d;
  const int64_t B = d.images[0].dim(0);
  const size_t per_image = static_cast<size_t>(d.images[0].numel() / B) * sizeof(float);
  const int64_t n = B * static_cast<int64_t>(d.images.size());
  const std::vector<int64_t> order = shuffled_order(n, seed);
  Dataset out;
  for (size_t b = 0; b < d.images.size(); ++b) {
    Tensor img(d.images[b].shape(), d.images[b].dtype());
    Tensor lab(d.labels[b].shape(), d.labels[b].dtype());
    for (int64_t k = 0; k < B; ++k) {
      const int64_t src = order[static_cast<int64_t>(b) * B + k];
      const Tensor& si = d.images[src / B];
      std::memcpy(static_cast<char*>(img.raw()) + k * per_image, static_cast<const char*>(si.raw()) + (src % B) * per_image,
                  per_image);
      lab.data<int32_t>()[k] = d.labels[src / B].data<int32_t>()[src % B];
    }
    out.images.push_back(std::move(img));
    out.labels.push_back(std::move(lab));
  }
  return out;
}

}  // namespace jobflow::data
