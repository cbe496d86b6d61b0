// tests/common/raw_tensor.h — data folders that a Python script writes at
// build time (tests/reference, tests/torch_onnx): an index.txt and raw
// little-endian tensors, one <name>.bin each.
//
//   struct Data {
//     explicit Data(const std::string& dir) {
//       for_each_index_line(dir + "/index.txt", [&](std::istringstream& fields, const std::string& line) {
//         std::string name, dtype, shape;
//         fields >> name >> dtype >> shape;   // "conv1.weight float32 32,1,5,5"
//         tensors[name] = read_raw(dir + "/" + name + ".bin", dtype_from_name(dtype), parse_shape(shape));
//       });
//     }
//     std::map<std::string, Tensor> tensors;
//   };
//   // In the fixture's SetUp:
//   std::string why;
//   const Data* data = load_data_dir<Data>("JOBFLOW_X_DIR", " Generate it with ...", why);
//   if (!data) GTEST_SKIP() << why;
//
// Compare what the engine gives with all_close (tensor_compare.h).
#pragma once

#include <jobflow/tensor.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "tensor_compare.h"

namespace jobflow::testing {

// The folder environment variable `var` names, when it is set and holds an
// index.txt; otherwise "" and `why` says which of the two is missing,
// followed by `how` (how to make the data).
inline std::string data_dir_from_env(const char* var, const std::string& how, std::string& why) {
  const char* dir = std::getenv(var);
  if (!dir || !*dir) {
    why = std::string(var) + " is not set." + how;
    return "";
  }
  if (!std::filesystem::exists(std::filesystem::path(dir) / "index.txt")) {
    why = std::string(var) + "=" + dir + " has no index.txt." + how;
    return "";
  }
  return dir;
}

// The T made, once, from the folder data_dir_from_env(var, how, why) finds
// (as T(dir)); nullptr with `why` set when there is none.
template <class T>
const T* load_data_dir(const char* var, const std::string& how, std::string& why) {
  static std::string reason;
  static const std::unique_ptr<T> data = [&] {
    const std::string dir = data_dir_from_env(var, how, reason);
    return dir.empty() ? std::unique_ptr<T>() : std::make_unique<T>(dir);
  }();
  why = reason;
  return data.get();
}

// Calls f(fields, line) for each line of the file at `path` that is neither
// empty nor a # comment, `fields` reading the line's words.
inline void for_each_index_line(const std::filesystem::path& path,
                                const std::function<void(std::istringstream&, const std::string&)>& f) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    f(fields, line);
  }
}

// "2,3,4" -> (2, 3, 4); "-" -> () (a scalar).
inline Shape parse_shape(const std::string& s) {
  Shape shape;
  if (s == "-") return shape;
  std::istringstream ss(s);
  for (std::string d; std::getline(ss, d, ',');) shape.push_back(std::stoll(d));
  return shape;
}

// The tensor of `dtype` and `shape` stored raw in the file at `path`, which
// must hold exactly its bytes.
inline Tensor read_raw(const std::filesystem::path& path, DType dtype, const Shape& shape) {
  Tensor t(shape, dtype);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path.string());
  f.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  if (f.gcount() != static_cast<std::streamsize>(t.nbytes()) || f.peek() != EOF)
    throw std::runtime_error(path.string() + " does not hold exactly " + std::to_string(t.nbytes()) + " bytes");
  return t;
}

}  // namespace jobflow::testing
