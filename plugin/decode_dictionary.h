/* jobdecode's dictionaries (internal to the plugin): the text of a file,
 * or of a metadata entry of an ONNX model (PP-OCR recognisers keep their
 * character list under the key "character"). */
#pragma once

#include <string>

namespace jobflow::gst {

/* `path` ending in ".onnx" (any case): the value of the model's
 * metadata_props entry `key`; any other path: the file's bytes. False with
 * *error naming the file (and the key) when it cannot be read. */
bool read_dictionary_text(const std::string& path, const std::string& key, std::string* text, std::string* error);

}  // namespace jobflow::gst
