// jobflow/jobflow.h — everything a program that defines and calls job
// functions needs. Examples alias the namespace as OneFlow's:
//
//   #include <jobflow/jobflow.h>
//   namespace flow = jobflow;
//
// Read in this order: tensor.h (data), job.h (defining and calling jobs),
// ops.h (what a body can compute), optimizer.h (training), session.h
// (variables and checkpoints), data.h (Fashion-MNIST and IDX files).
#pragma once

#include "jobflow/data.h"
#include "jobflow/graph.h"
#include "jobflow/job.h"
#include "jobflow/ops.h"
#include "jobflow/optimizer.h"
#include "jobflow/runtime.h"
#include "jobflow/sequence.h"
#include "jobflow/session.h"
#include "jobflow/strings.h"
#include "jobflow/tensor.h"
