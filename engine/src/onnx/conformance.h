// The ONNX conformance runner behind `jobflow onnx-test DIR...`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace jobflow::onnx {

// Runs every ONNX backend test case found under `dirs` (a folder holding
// model.onnx and test_data_set_*/{input_N.pb,output_N.pb}, or a folder of
// such folders): loads the model as a predict job, feeds the inputs and
// compares the outputs (tolerances: conformance.cpp). Prints one line per
// failed case with its worst element, then "N passed, N failed, N skipped"
// and, for skipped cases, the missing ops with how many cases need each.
// `verbose` also prints passed and skipped cases. A case may only be
// skipped for what the importer does not support yet, each reason one of
// "Op", "domain.Op", "Op(what)", "dtype T", "dynamic input shape" or
// "non-tensor input"; any other reason
// counts as a failure. Returns 0 when no case failed and at least
// `min_pass` passed (when >= 0), 1 otherwise (2 when a folder does not
// exist), saying which expectation was not met.
int run_onnx_tests(const std::vector<std::string>& dirs, std::ostream& out, bool verbose, int min_pass = -1);

}  // namespace jobflow::onnx
