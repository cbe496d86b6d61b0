// jobflow/job.h — defining and calling job functions.
//
// A job function is defined once with typed placeholders, a type (Train or
// Predict) and a FunctionConfig; its body runs once, at definition, to build
// the graph; the engine compiles it into a plan; every call feeds real data:
//
//   auto train_job = flow::global_function(flow::Train, config,
//       {flow::Numpy::Placeholder({100, 1, 28, 28}, flow::Float, "images"),
//        flow::Numpy::Placeholder({100}, flow::Int32, "labels")},
//       [](flow::Blob images, flow::Blob labels) -> flow::Numpy {
//         ...; flow::optimizer::SGD(sched, 0).minimize(loss); return loss; });
//   flow::Tensor loss = train_job(images, labels);   // synchronous
//
// The body's return type is the seeds' return annotation:
//   flow::Blob / flow::Numpy        -> one Tensor
//   flow::ListNumpy                 -> std::vector<Tensor>, one per device
//   flow::ListListNumpy             -> per device, a list of tensors
//   std::tuple / std::pair          -> std::tuple / std::pair of results
//   std::vector<T>                  -> std::vector of results
//   std::map<std::string|int, T>    -> std::map (the seeds' Dict)
//   void                            -> nothing (OneFlow's "return None")
//   flow::Callback<T>               -> asynchronous: the call returns at once
//                                      a Callbacker; give it the callback:
//                                      train_job(images, labels)(print_loss);
// Any job can also be called asynchronously with job.async(args...)(cb).
// OneFlow's older styles work on what an asynchronous call returns:
// job.async(args...).get() blocks for the result, .async_get(cb) = (cb).
// Callbacks run on the job's callback thread, in call order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "jobflow/graph.h"
#include "jobflow/runtime.h"
#include "jobflow/tensor.h"

namespace jobflow {

class FunctionConfig {
 public:
  FunctionConfig& default_data_type(DType t) { dtype_ = t; return *this; }
  DType default_data_type() const { return dtype_; }
  // Placement of ops outside any scope::placement ("cpu" or "gpu").
  FunctionConfig& default_placement(std::string device, std::string ids = "0:0") {
    placement_ = {std::move(device), std::move(ids)};
    return *this;
  }
  const Placement& default_placement() const { return placement_; }
  FunctionConfig& max_in_flight(size_t n) { max_in_flight_ = n; return *this; }
  size_t max_in_flight() const { return max_in_flight_; }
  // Threads the job's kernels use (OpenMP; set on the job's worker thread
  // only). 0: $JOBFLOW_NUM_THREADS if set, else OpenMP's default (all cores).
  FunctionConfig& num_threads(int n) { threads_ = n; return *this; }
  int num_threads() const { return threads_; }
  FunctionConfig& seed(uint64_t s) { seed_ = s; return *this; }
  uint64_t seed() const { return seed_; }
  FunctionConfig& enable_fusion(bool on) { fusion_ = on; return *this; }
  bool enable_fusion() const { return fusion_; }
  // OneFlow's mixed precision: convolutions (and, in predict jobs, the
  // activations between them) in bfloat16 with float32 accumulation;
  // element-wise ops, reductions, the returns, and a train job's weights,
  // gradients and optimizer state stay float32. Uses AMX where the CPU has
  // it, AVX512_BF16 otherwise where its dot products reach 0.75x the
  // float32 FMA rate (measured once per process; JOBFLOW_BF16=always: in
  // any case); elsewhere the job runs in float32 after a one-line notice
  // (jobflow::cpu_isa() says which). Results then differ
  // from float32 by about bfloat16's precision (8 bits of mantissa):
  // docs/performance.md gives the measured differences.
  FunctionConfig& enable_auto_mixed_precision(bool on) { bf16_ = on; return *this; }
  bool enable_auto_mixed_precision() const { return bf16_; }
  FunctionConfig& name(std::string n) { name_ = std::move(n); return *this; }
  const std::string& name() const { return name_; }
  // Train jobs: write TensorBoard event files into `dir` (summary.h): at
  // every step, "loss" (the mean of the returned loss, the blob given to
  // minimize()) and "learning_rate" (the rate that step used), at the step
  // number counted from 1. Watch with `tensorboard --logdir dir`. The job
  // must return its loss; a build without protobuf refuses (summary.h).
  FunctionConfig& summary_dir(std::string dir) { summary_dir_ = std::move(dir); return *this; }
  const std::string& summary_dir() const { return summary_dir_; }
  // Jobs with dynamic dims (-1 in a placeholder's shape) compile a plan per
  // combination of call shapes and keep at most this many (least recently
  // used evicted), and at most `bytes` of plan memory (arenas) in all.
  FunctionConfig& plan_cache_size(size_t n) { plan_cache_size_ = n; return *this; }
  size_t plan_cache_size() const { return plan_cache_size_; }
  FunctionConfig& plan_cache_bytes(size_t bytes) { plan_cache_bytes_ = bytes; return *this; }
  size_t plan_cache_bytes() const { return plan_cache_bytes_; }
  // Declares that the job's returns `labels` (integers, (B,)) and `logits`
  // (floats, (B, C)), flat indices, score an accuracy: the share of rows
  // whose argmax is the label (the seeds' eval_job returns (labels,
  // logits): accuracy(0, 1)). The signature carries it (accuracy_labels,
  // accuracy_logits), job files keep it (jobflow.accuracy), and the
  // jobfunction element reports it; jobs that do not declare it report
  // none. Checked when the job is defined (an error names the returns).
  FunctionConfig& accuracy(int labels, int logits) { accuracy_ = {labels, logits}; return *this; }
  std::pair<int, int> accuracy() const { return accuracy_; }

 private:
  DType dtype_ = DType::Float32;
  Placement placement_;
  size_t max_in_flight_ = 4;
  int threads_ = 0;
  uint64_t seed_ = 0;
  bool fusion_ = true;
  bool bf16_ = false;
  std::string name_;
  std::string summary_dir_;
  size_t plan_cache_size_ = 16;
  size_t plan_cache_bytes_ = size_t{1} << 31;
  std::pair<int, int> accuracy_{-1, -1};
};
inline FunctionConfig function_config() { return FunctionConfig(); }

// A placeholder declaration (oneflow.typing.Numpy.Placeholder, ...).
struct PlaceholderSpec {
  Structure::Kind kind = Structure::Kind::Leaf;  // Leaf or Tuple
  Structure::Leaf leaf = Structure::Leaf::Numpy;
  Shape shape;
  std::optional<DType> dtype;  // empty: the config's default_data_type
  std::string name;            // empty: "arg<i>"
  std::vector<PlaceholderSpec> children;  // Tuple
  int64_t items = 1;           // ListListNumpy: tensors per device list
  // Names of dynamic dims (one per dim, empty = unnamed), as signature().str()
  // prints them; empty = none named.
  std::vector<std::string> dim_names;
};
struct Numpy {
  // A numpy.ndarray argument of this shape and dtype. A dim of -1
  // (kDynamic) takes any size at each call: the job compiles a plan per
  // call shape (a last partial batch, batch 1 and batch 64 from one job).
  static PlaceholderSpec Placeholder(Shape shape, std::optional<DType> dtype = std::nullopt, std::string name = "") {
    return {Structure::Kind::Leaf, Structure::Leaf::Numpy, std::move(shape), dtype, std::move(name), {}, 1, {}};
  }
  Numpy(Blob b) : blob(b) {}
  Blob blob;
};
struct ListNumpy {
  // A list with one array per device (one device here: a list of one).
  static PlaceholderSpec Placeholder(Shape shape, std::optional<DType> dtype = std::nullopt, std::string name = "") {
    return {Structure::Kind::Leaf, Structure::Leaf::ListNumpy, std::move(shape), dtype, std::move(name), {}, 1, {}};
  }
  ListNumpy(Blob b) : blob(b) {}
  Blob blob;
};
struct ListListNumpy {
  // Per device, a list of `items` arrays, each of exactly `shape`. OneFlow's
  // lists are dynamic; a compiled plan is static, so the length is fixed
  // here. In the body the list is one blob of shape (items, *shape); a
  // ListListNumpy return splits its blob along dim 0 into such a list.
  static PlaceholderSpec Placeholder(Shape shape, std::optional<DType> dtype = std::nullopt, std::string name = "",
                                     int64_t items = 1) {
    return {Structure::Kind::Leaf, Structure::Leaf::ListListNumpy, std::move(shape), dtype, std::move(name), {}, items, {}};
  }
  ListListNumpy(Blob b) : blob(b) {}
  Blob blob;
};
// A tuple of placeholders: the body parameter is a std::tuple of Blobs (or
// std::vector<Blob>), the call argument a std::tuple of Tensors.
inline PlaceholderSpec TuplePlaceholder(std::vector<PlaceholderSpec> items, std::string name = "") {
  PlaceholderSpec p;
  p.kind = Structure::Kind::Tuple;
  p.children = std::move(items);
  p.name = std::move(name);
  return p;
}

// Return annotation of an asynchronous job: -> flow::Callback<T>.
template <class T>
struct Callback {
  Callback(T v) : value(std::move(v)) {}
  template <class U, class = std::enable_if_t<std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T>>>
  Callback(U&& u) : value(std::forward<U>(u)) {}
  T value;
};

// ---------------------------------------------------------------------------
namespace detail {

// Non-template part of definition: placeholders -> blobs, then compile.
class JobBuilder {
 public:
  JobBuilder(JobType type, const FunctionConfig& config, const std::vector<PlaceholderSpec>& specs);
  ~JobBuilder();
  JobBuilder(const JobBuilder&) = delete;
  JobBuilder& operator=(const JobBuilder&) = delete;
  // The blob of flat placeholder `i` (in declaration order, tuples expanded).
  Blob input(int i) const;
  const std::vector<PlaceholderSpec>& specs() const;
  // The prefix of the session names the job does not share
  // (JobDefinition::variable_scope): finish() gives it to the train step
  // counter; onnx::load names an ordinary model's variables with it too
  // when they must not be shared. Before finish().
  void set_variable_scope(std::string scope);
  // Runs under the builder's graph scope.
  void enter();
  void leave();
  // `output_names`: the returns' names, when they have some (Signature).
  std::shared_ptr<CompiledJob> finish(std::vector<Blob> outputs, Structure s, bool callback,
                                      std::vector<std::string> output_names = {});

 struct State;

 private:
  std::unique_ptr<State> st_;
};

template <class T> struct is_tuple_like : std::false_type {};
template <class... T> struct is_tuple_like<std::tuple<T...>> : std::true_type {};
template <class A, class B> struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <class T> struct is_vector : std::false_type {};
template <class T, class A> struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T> struct is_map : std::false_type {};
template <class K, class V, class C, class A> struct is_map<std::map<K, V, C, A>> : std::true_type {};
template <class T> struct is_callback : std::false_type {};
template <class T> struct is_callback<Callback<T>> : std::true_type {};

// Blob-side return type -> host-side result type.
template <class T, class = void> struct HostOf;
template <> struct HostOf<Blob> { using type = Tensor; };
template <> struct HostOf<Numpy> { using type = Tensor; };
template <> struct HostOf<ListNumpy> { using type = std::vector<Tensor>; };
template <> struct HostOf<ListListNumpy> { using type = std::vector<std::vector<Tensor>>; };
template <> struct HostOf<void> { using type = void; };
template <class... T> struct HostOf<std::tuple<T...>> { using type = std::tuple<typename HostOf<T>::type...>; };
template <class A, class B> struct HostOf<std::pair<A, B>> {
  using type = std::pair<typename HostOf<A>::type, typename HostOf<B>::type>;
};
template <class T> struct HostOf<std::vector<T>> { using type = std::vector<typename HostOf<T>::type>; };
template <class K, class V> struct HostOf<std::map<K, V>> { using type = std::map<K, typename HostOf<V>::type>; };
template <class T> struct HostOf<Callback<T>> { using type = typename HostOf<T>::type; };
template <class T> using host_t = typename HostOf<T>::type;

template <class K> std::string key_text(const K& k) {
  if constexpr (std::is_convertible_v<K, std::string>) return std::string(k);
  else return std::to_string(k);
}

// Flattens a Blob-side return value into blobs + structure.
inline Structure leaf_of(Structure::Leaf l, std::vector<Blob>& out, Blob b) {
  Structure s;
  s.kind = Structure::Kind::Leaf;
  s.leaf = l;
  s.index = static_cast<int>(out.size());
  out.push_back(b);
  return s;
}
template <class T>
Structure flatten_ret(const T& v, std::vector<Blob>& out) {
  if constexpr (std::is_same_v<T, Blob>) return leaf_of(Structure::Leaf::Numpy, out, v);
  else if constexpr (std::is_same_v<T, Numpy>) return leaf_of(Structure::Leaf::Numpy, out, v.blob);
  else if constexpr (std::is_same_v<T, ListNumpy>) return leaf_of(Structure::Leaf::ListNumpy, out, v.blob);
  else if constexpr (std::is_same_v<T, ListListNumpy>) return leaf_of(Structure::Leaf::ListListNumpy, out, v.blob);
  else if constexpr (is_tuple_like<T>::value) {
    Structure s;
    s.kind = Structure::Kind::Tuple;
    std::apply([&](const auto&... e) { (s.children.push_back(flatten_ret(e, out)), ...); }, v);
    return s;
  } else if constexpr (is_vector<T>::value) {
    Structure s;
    s.kind = Structure::Kind::List;
    for (const auto& e : v) s.children.push_back(flatten_ret(e, out));
    return s;
  } else if constexpr (is_map<T>::value) {
    Structure s;
    s.kind = Structure::Kind::Dict;
    for (const auto& [k, e] : v) {
      s.keys.push_back(key_text(k));
      s.children.push_back(flatten_ret(e, out));
    }
    return s;
  } else {
    static_assert(sizeof(T) == 0, "a job function returns Blobs, or tuples/vectors/maps of them");
  }
}

// Splits a ListListNumpy result blob along dim 0 (copies).
std::vector<Tensor> split_dim0(const Tensor& t);
Tensor stack_dim0(const std::vector<Tensor>& items, const TensorSpec& spec, const std::string& what);

template <class K> K key_from_text(const std::string& s) {
  if constexpr (std::is_convertible_v<std::string, K>) return K(s);
  else return static_cast<K>(std::stoll(s));
}

// Rebuilds the host-side result from flat tensors.
template <class T>
host_t<T> unflatten(const Structure& s, std::vector<Tensor>& flat) {
  if constexpr (std::is_same_v<T, Blob> || std::is_same_v<T, Numpy>) return flat.at(s.index);
  else if constexpr (std::is_same_v<T, ListNumpy>) return std::vector<Tensor>{flat.at(s.index)};
  else if constexpr (std::is_same_v<T, ListListNumpy>)
    return std::vector<std::vector<Tensor>>{split_dim0(flat.at(s.index))};
  else if constexpr (is_tuple_like<T>::value) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return host_t<T>{unflatten<std::tuple_element_t<I, T>>(s.children.at(I), flat)...};
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (is_vector<T>::value) {
    host_t<T> r;
    for (const auto& c : s.children) r.push_back(unflatten<typename T::value_type>(c, flat));
    return r;
  } else if constexpr (is_map<T>::value) {
    host_t<T> r;
    for (size_t i = 0; i < s.children.size(); ++i)
      r.emplace(key_from_text<typename T::key_type>(s.keys[i]), unflatten<typename T::mapped_type>(s.children[i], flat));
    return r;
  }
}

// Builds the body's parameter of type P from placeholder `spec`.
template <class P>
P make_param(const PlaceholderSpec& spec, JobBuilder& b, int& next) {
  if constexpr (std::is_same_v<P, Blob>) {
    if (spec.kind != Structure::Kind::Leaf)
      throw Error("[global_function] placeholder '" + spec.name + "' is a tuple but the body takes a Blob");
    return b.input(next++);
  } else if constexpr (is_tuple_like<P>::value) {
    if (spec.kind != Structure::Kind::Tuple || spec.children.size() != std::tuple_size_v<P>)
      throw Error("[global_function] placeholder '" + spec.name + "' does not match the body's tuple parameter");
    return [&]<size_t... I>(std::index_sequence<I...>) {
      P r;
      ((std::get<I>(r) = make_param<std::tuple_element_t<I, P>>(spec.children[I], b, next)), ...);
      return r;
    }(std::make_index_sequence<std::tuple_size_v<P>>{});
  } else if constexpr (is_vector<P>::value) {
    if (spec.kind != Structure::Kind::Tuple)
      throw Error("[global_function] placeholder '" + spec.name + "' is not a tuple but the body takes a vector");
    P r;
    for (const auto& c : spec.children) r.push_back(make_param<typename P::value_type>(c, b, next));
    return r;
  } else {
    static_assert(sizeof(P) == 0, "job function parameters are Blob, std::tuple<Blob...> or std::vector<Blob>");
  }
}

// Call arguments -> flat tensors, checked against the placeholder tree.
void pack_arg(const Tensor& t, const PlaceholderSpec& spec, std::vector<Tensor>& flat, const std::string& job);
void pack_arg(const std::vector<Tensor>& t, const PlaceholderSpec& spec, std::vector<Tensor>& flat, const std::string& job);
void pack_arg(const std::vector<std::vector<Tensor>>& t, const PlaceholderSpec& spec, std::vector<Tensor>& flat,
              const std::string& job);
void arity_error(const std::string& job, size_t want, size_t got);
void tuple_arg_error(const std::string& job, const PlaceholderSpec& spec, size_t got);
template <class... T>
void pack_arg(const std::tuple<T...>& t, const PlaceholderSpec& spec, std::vector<Tensor>& flat, const std::string& job) {
  if (spec.kind != Structure::Kind::Tuple || spec.children.size() != sizeof...(T)) tuple_arg_error(job, spec, sizeof...(T));
  [&]<size_t... I>(std::index_sequence<I...>) {
    (pack_arg(std::get<I>(t), spec.children[I], flat, job), ...);
  }(std::index_sequence_for<T...>{});
}

template <class F> struct fn_traits : fn_traits<decltype(&F::operator())> {};
template <class C, class R, class... A> struct fn_traits<R (C::*)(A...) const> {
  using ret = R;
  using args = std::tuple<std::decay_t<A>...>;
};
template <class C, class R, class... A> struct fn_traits<R (C::*)(A...)> {
  using ret = R;
  using args = std::tuple<std::decay_t<A>...>;
};
template <class R, class... A> struct fn_traits<R (*)(A...)> {
  using ret = R;
  using args = std::tuple<std::decay_t<A>...>;
};

}  // namespace detail

// What an asynchronous call returns: call it with the callback.
template <class H>
class Callbacker {
 public:
  Callbacker(std::shared_ptr<CompiledJob> job, std::shared_ptr<CallState> call,
             std::function<H(std::vector<Tensor>&)> convert)
      : job_(std::move(job)), call_(std::move(call)), convert_(std::move(convert)) {}
  Callbacker(Callbacker&& o) noexcept
      : job_(std::move(o.job_)), call_(std::move(o.call_)), convert_(std::move(o.convert_)) {}
  Callbacker(const Callbacker&) = delete;
  Callbacker& operator=(const Callbacker&) = delete;
  ~Callbacker() {
    if (call_) CompiledJob::abandon(call_);
  }
  // Registers the callback; it runs on the job's callback thread.
  void operator()(std::function<void(H)> cb) {
    if (!call_) throw Error("[Callbacker] a callback was already given for this call");
    auto conv = convert_;
    CompiledJob::attach(call_, [cb = std::move(cb), conv](std::vector<Tensor> r) { cb(conv(r)); });
    call_.reset();
  }
  // OneFlow's older result styles (flow.function, seed 001):
  //   H r = job(args).get();          // blocks; returns the result
  //   job(args).async_get(callback);  // the same as job(args)(callback)
  // get() waits like job.sync() (for this call and every call before it)
  // and throws the call's error, or an earlier asynchronous one.
  H get() {
    if (!call_) throw Error("[Callbacker] a callback was already given for this call");
    auto box = std::make_shared<std::optional<H>>();
    auto conv = convert_;
    CompiledJob::attach(call_, [box, conv](std::vector<Tensor> r) { box->emplace(conv(r)); });
    call_.reset();
    job_->sync();
    if (!*box)
      throw Error("[" + job_->signature().job_name + "] get(): the call failed and its error was reported elsewhere");
    return std::move(**box);
  }
  void async_get(std::function<void(H)> cb) { (*this)(std::move(cb)); }

 private:
  std::shared_ptr<CompiledJob> job_;
  std::shared_ptr<CallState> call_;
  std::function<H(std::vector<Tensor>&)> convert_;
};

template <class Ret>
class Job {
 public:
  static constexpr bool is_async = detail::is_callback<Ret>::value;
  using Host = detail::host_t<Ret>;

  Job(std::shared_ptr<CompiledJob> impl, std::vector<PlaceholderSpec> specs)
      : impl_(std::move(impl)), specs_(std::move(specs)) {}

  template <class... A>
  auto operator()(const A&... args) {
    std::vector<Tensor> in = pack(args...);
    if constexpr (is_async) {
      return make_callbacker(std::move(in));
    } else if constexpr (std::is_void_v<Host>) {
      impl_->run(std::move(in));
    } else {
      std::vector<Tensor> out = impl_->run(std::move(in));
      return convert(out);
    }
  }
  // The asynchronous path for any job: job.async(a, b)(callback).
  template <class... A>
  auto async(const A&... args) {
    return make_callbacker(pack(args...));
  }
  void sync() { impl_->sync(); }
  const Signature& signature() const { return impl_->signature(); }
  const std::shared_ptr<CompiledJob>& compiled() const { return impl_; }

 private:
  template <class... A>
  std::vector<Tensor> pack(const A&... args) {
    if (sizeof...(A) != specs_.size()) detail::arity_error(impl_->signature().job_name, specs_.size(), sizeof...(A));
    std::vector<Tensor> flat;
    size_t i = 0;
    (detail::pack_arg(args, specs_[i++], flat, impl_->signature().job_name), ...);
    impl_->check_inputs(flat);
    return flat;
  }
  Host convert(std::vector<Tensor>& out) const {
    if constexpr (std::is_void_v<Host>) return;
    else return unflatten_host(impl_->signature().output_structure, out);
  }
  static Host unflatten_host(const Structure& s, std::vector<Tensor>& out) {
    if constexpr (std::is_void_v<Host>) return;
    else return detail::unflatten<typename Unwrap<Ret>::type>(s, out);
  }
  template <class T> struct Unwrap { using type = T; };
  template <class T> struct Unwrap<Callback<T>> { using type = T; };
  using CbArg = std::conditional_t<std::is_void_v<Host>, std::vector<Tensor>, Host>;
  Callbacker<CbArg> make_callbacker(std::vector<Tensor> in) {
    auto call = impl_->launch(std::move(in));
    Structure s = impl_->signature().output_structure;
    return Callbacker<CbArg>(impl_, std::move(call), [s](std::vector<Tensor>& r) -> CbArg {
      if constexpr (std::is_void_v<Host>) return r;
      else return unflatten_host(s, r);
    });
  }

  std::shared_ptr<CompiledJob> impl_;
  std::vector<PlaceholderSpec> specs_;
};

// flow.global_function(type, function_config): runs `body` once with
// placeholder Blobs, compiles the graph and returns the callable job.
template <class F>
auto global_function(JobType type, const FunctionConfig& config, std::vector<PlaceholderSpec> specs, F body) {
  using Traits = detail::fn_traits<F>;
  using Ret = typename Traits::ret;
  using Args = typename Traits::args;
  if (std::tuple_size_v<Args> != specs.size())
    throw Error("[global_function] the body takes " + std::to_string(std::tuple_size_v<Args>) +
                " parameters but " + std::to_string(specs.size()) + " placeholders were declared");
  detail::JobBuilder b(type, config, specs);
  b.enter();
  std::vector<Blob> outs;
  Structure s;
  try {
    int next = 0;
    Args args = [&]<size_t... I>(std::index_sequence<I...>) {
      Args a;
      ((std::get<I>(a) = detail::make_param<std::tuple_element_t<I, Args>>(b.specs()[I], b, next)), ...);
      return a;
    }(std::make_index_sequence<std::tuple_size_v<Args>>{});
    if constexpr (std::is_void_v<Ret>) {
      std::apply(body, args);
      s.kind = Structure::Kind::None;
    } else {
      Ret r = std::apply(body, args);
      if constexpr (detail::is_callback<Ret>::value) s = detail::flatten_ret(r.value, outs);
      else s = detail::flatten_ret(r, outs);
    }
  } catch (...) {
    b.leave();
    throw;
  }
  b.leave();
  auto compiled = b.finish(std::move(outs), std::move(s), detail::is_callback<Ret>::value);
  return Job<Ret>(std::move(compiled), b.specs());
}
template <class F>
auto global_function(JobType type, std::vector<PlaceholderSpec> specs, F body) {
  return global_function(type, FunctionConfig(), std::move(specs), std::move(body));
}

// True while a train job's body is being defined (dropout and batch
// normalization behave differently in predict jobs).
bool defining_train_job();

namespace optimizer { class Optimizer; }
namespace detail {
// Called by Optimizer::minimize() inside a train job's body.
void set_objective(Blob loss, std::shared_ptr<optimizer::Optimizer> opt);
}  // namespace detail

}  // namespace jobflow
