/* Dictionaries from text files or ONNX metadata: see decode_dictionary.h. */
#include "decode_dictionary.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>

namespace jobflow::gst {

namespace {

bool ends_with_onnx(const std::string& path) {
  if (path.size() < 5) return false;
  std::string tail = path.substr(path.size() - 5);
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return std::tolower(c); });
  return tail == ".onnx";
}

}  // namespace

bool read_dictionary_text(const std::string& path, const std::string& key, std::string* text, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open \"" + path + "\"";
    return false;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!ends_with_onnx(path)) {
    *text = std::move(bytes);
    return true;
  }
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    *error = "\"" + path + "\" is not an ONNX model";
    return false;
  }
  std::ostringstream keys;
  for (const auto& kv : model.metadata_props()) {
    if (kv.key() == key) {
      *text = kv.value();
      return true;
    }
    keys << (keys.tellp() > 0 ? ", " : "") << kv.key();
  }
  *error = "the ONNX model \"" + path + "\" has no metadata key \"" + key + "\"" +
           (keys.tellp() > 0 ? " (it has: " + keys.str() + ")" : " (it has no metadata)");
  return false;
}

}  // namespace jobflow::gst
