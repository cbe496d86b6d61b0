// FileWriter in a build without protobuf or protoc: the API is there, and
// using it says what the build lacks.
#include "jobflow/summary.h"
#include "jobflow/tensor.h"

namespace jobflow::summary {

struct FileWriter::Impl {
  std::string path;
};

FileWriter::FileWriter(const std::string& logdir) {
  throw Error("[summary.FileWriter] cannot write event files to '" + logdir +
              "': this Jobflow was built without protobuf (the meson option onnx, libprotobuf-dev) or without protoc "
              "(protobuf-compiler); install them (scripts/setup) and rebuild");
}
FileWriter::~FileWriter() = default;
void FileWriter::scalar(const std::string&, double, int64_t) {}
void FileWriter::scalars(const std::vector<std::pair<std::string, double>>&, int64_t) {}
void FileWriter::flush() {}
const std::string& FileWriter::path() const { return impl_->path; }

}  // namespace jobflow::summary
