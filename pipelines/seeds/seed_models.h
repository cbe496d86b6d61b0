// Moved into the engine: jobflow/models/seeds.h (namespace jobflow::models).
#pragma once
#include <jobflow/models/seeds.h>
namespace seeds { using namespace jobflow::models; }  // the old seeds:: names
