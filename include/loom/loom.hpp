/* loom.hpp — C++17, header-only: RAII over loom's C ABI (everything of
 * loom.h stays available).
 *
 *   #include <loom/loom.hpp>
 *   loom::Scope scope;                     // tensors made below die with it
 *   auto x = loom::randn({8, 4});
 *   double s = (x * x).sum().item();       // a failure throws loom::Error
 *
 * loom::Tensor holds one reference: copying retains, destruction releases,
 * moving hands it over. A tensor a loom call makes inside an open scope is
 * also owned by that scope; the Tensor then takes a reference of its own, so
 * a Tensor is always valid while it lives, and the scope's reference goes
 * when the scope ends. loom::Scope opens a scope for its lifetime: what C
 * code makes inside (module forwards, ...) dies with it.
 *
 * loom::Module owns a loom_module (move-only; loom_module_free on
 * destruction) unless a container took it; loom::Optimizer owns a
 * loom_optimizer and keeps its parameters alive.
 *
 * Errors: a failed loom call throws loom::Error, carrying loom's status and
 * message. Without exceptions (-fno-exceptions, or LOOM_HPP_NO_EXCEPTIONS
 * defined before including this), nothing throws: calls that would return a
 * Tensor return an empty one (`if (!t)`), calls that return loom_status
 * return the failure, item() returns NaN, and loom::last_error() /
 * loom::last_status() say what failed. The two modes live in different
 * inline namespaces, so translation units built either way link together. */
#ifndef LOOM_HPP
#define LOOM_HPP

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom.h"

#if defined(LOOM_HPP_NO_EXCEPTIONS) || !(defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#define LOOM_HPP_EXCEPTIONS 0
#else
#define LOOM_HPP_EXCEPTIONS 1
#endif

namespace loom {

/* A failed loom call: status() is the loom_status, what() loom's message. */
class Error : public std::runtime_error {
 public:
  Error(loom_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  loom_status status() const noexcept { return status_; }

 private:
  loom_status status_;
};

inline std::string last_error() { return loom_last_error(); }
inline loom_status last_status() { return loom_last_status(); }

#if LOOM_HPP_EXCEPTIONS
inline namespace with_exceptions {
#else
inline namespace without_exceptions {
#endif

namespace detail {
/* The current loom failure: thrown as loom::Error, or returned. */
inline loom_status fail() {
  loom_status st = loom_last_status();
  if (st == LOOM_OK) st = LOOM_ERR_INTERNAL;
#if LOOM_HPP_EXCEPTIONS
  throw Error(st, loom_last_error());
#else
  return st;
#endif
}
inline loom_status check(loom_status st) { return st == LOOM_OK ? st : fail(); }
}  // namespace detail

/* ---- scopes ------------------------------------------------------------------------- */
class Scope {
 public:
  Scope() { loom_scope_begin(); }
  ~Scope() { loom_scope_end(); }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;
};

/* ---- tensors ------------------------------------------------------------------------- */
class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor &o) : t_(o.t_ ? loom_tensor_retain(o.t_) : nullptr) {}
  Tensor(Tensor &&o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
  Tensor &operator=(Tensor o) noexcept {
    std::swap(t_, o.t_);
    return *this;
  }
  ~Tensor() {
    if (t_) loom_tensor_release(t_);
  }

  /* A tensor a loom call just made (the ownership rule decides whether the
   * scope or the caller owns it; either way this Tensor gets its own
   * reference). NULL: the call failed — thrown, or an empty Tensor. */
  static Tensor made(loom_tensor *t) {
    if (!t) {
      detail::fail();
      return Tensor();
    }
    return Tensor(loom_scope_depth() > 0 ? loom_tensor_retain(t) : t);
  }
  /* A tensor loom lends (a parameter, a gradient): retained. */
  static Tensor borrow(loom_tensor *t) { return Tensor(t ? loom_tensor_retain(t) : nullptr); }

  loom_tensor *get() const noexcept { return t_; }
  explicit operator bool() const noexcept { return t_ != nullptr; }

  /* ---- metadata ---- */
  int ndim() const { return loom_tensor_ndim(t_); }
  std::vector<int64_t> shape() const {
    const int64_t *s = loom_tensor_shape(t_);
    return s ? std::vector<int64_t>(s, s + ndim()) : std::vector<int64_t>();
  }
  int64_t size(int dim) const { return loom_tensor_dim(t_, dim); }
  int64_t numel() const { return loom_tensor_numel(t_); }
  loom_dtype dtype() const { return loom_tensor_dtype(t_); }
  loom_device device() const { return loom_tensor_device(t_); }

  /* ---- values ---- */
  /* The single element as a double (NaN on failure without exceptions). */
  double item() const {
    double v = std::numeric_limits<double>::quiet_NaN();
    if (loom_item(t_, &v) != LOOM_OK) detail::fail();
    return v;
  }
  /* All elements, row-major, converted to T (float, int32_t, int64_t or uint8_t). */
  template <class T>
  std::vector<T> to_vector() const {
    std::vector<T> out(t_ ? static_cast<size_t>(numel()) : 0);
    if (loom_to_host(t_, out.data(), out.size() * sizeof(T), host_dtype<T>()) != LOOM_OK) {
      detail::fail();
      out.clear();
    }
    return out;
  }
  template <class T>
  static constexpr loom_dtype host_dtype() {
    static_assert(std::is_same<T, float>::value || std::is_same<T, int32_t>::value ||
                      std::is_same<T, int64_t>::value || std::is_same<T, uint8_t>::value,
                  "loom::Tensor::to_vector<T>: T is float, int32_t, int64_t or uint8_t");
    return std::is_same<T, float>::value     ? LOOM_F32
           : std::is_same<T, int32_t>::value ? LOOM_I32
           : std::is_same<T, int64_t>::value ? LOOM_I64
                                             : LOOM_U8;
  }

  /* ---- autograd ---- */
  bool requires_grad() const { return loom_requires_grad(t_); }
  Tensor &requires_grad_(bool on = true) {
    detail::check(loom_set_requires_grad(t_, on));
    return *this;
  }
  Tensor grad() const { return borrow(loom_grad(t_)); }
  loom_status backward() const { return detail::check(loom_backward(t_)); }
  loom_status zero_grad() const { return detail::check(loom_zero_grad(t_)); }
  Tensor detach() const { return made(loom_detach(t_)); }

  /* ---- views and copies ---- */
  Tensor reshape(std::vector<int64_t> s) const {
    return made(loom_reshape(t_, static_cast<int>(s.size()), s.data()));
  }
  Tensor view(std::vector<int64_t> s) const { return made(loom_view(t_, static_cast<int>(s.size()), s.data())); }
  Tensor permute(std::vector<int> dims) const { return made(loom_permute(t_, dims.data())); }
  Tensor transpose(int d0, int d1) const { return made(loom_transpose(t_, d0, d1)); }
  Tensor slice(int dim, int64_t start, int64_t end, int64_t step = 1) const {
    return made(loom_slice(t_, dim, start, end, step));
  }
  Tensor flatten(int start_dim = 0, int end_dim = -1) const { return made(loom_flatten(t_, start_dim, end_dim)); }
  Tensor contiguous() const { return made(loom_contiguous(t_)); }
  Tensor clone() const { return made(loom_clone(t_)); }
  Tensor to(loom_dtype dt) const { return made(loom_cast(t_, dt)); }
  Tensor to(loom_device dev) const { return made(loom_to_device(t_, dev)); }
  loom_status copy_(const Tensor &src) const { return detail::check(loom_copy_(t_, src.t_)); }
  loom_status fill_(double v) const { return detail::check(loom_fill_(t_, v)); }

  /* ---- math ---- */
  Tensor matmul(const Tensor &o) const { return made(loom_matmul(t_, o.t_)); }
  Tensor relu() const { return made(loom_relu(t_)); }
  Tensor exp() const { return made(loom_exp(t_)); }
  Tensor log() const { return made(loom_log(t_)); }
  Tensor sqrt() const { return made(loom_sqrt(t_)); }
  Tensor pow(double p) const { return made(loom_pow_scalar(t_, p)); }
  Tensor log_softmax(int dim = -1) const { return made(loom_log_softmax(t_, dim)); }
  Tensor softmax(int dim = -1) const { return log_softmax(dim).exp(); }
  /* Over dims (none: everything, a 0-d result). */
  Tensor sum(std::vector<int> dims = {}, bool keepdim = false) const {
    return made(loom_sum(t_, static_cast<int>(dims.size()), dims.data(), keepdim));
  }
  Tensor mean(std::vector<int> dims = {}, bool keepdim = false) const {
    return made(loom_mean(t_, static_cast<int>(dims.size()), dims.data(), keepdim));
  }
  Tensor max(std::vector<int> dims = {}, bool keepdim = false) const {
    return made(loom_max(t_, static_cast<int>(dims.size()), dims.data(), keepdim));
  }
  Tensor argmax(int dim = -1, bool keepdim = false) const { return made(loom_argmax(t_, dim, keepdim)); }

  friend Tensor operator+(const Tensor &a, const Tensor &b) { return made(loom_add(a.t_, b.t_)); }
  friend Tensor operator-(const Tensor &a, const Tensor &b) { return made(loom_sub(a.t_, b.t_)); }
  friend Tensor operator*(const Tensor &a, const Tensor &b) { return made(loom_mul(a.t_, b.t_)); }
  friend Tensor operator/(const Tensor &a, const Tensor &b) { return made(loom_div(a.t_, b.t_)); }
  friend Tensor operator+(const Tensor &a, double s) { return made(loom_add_scalar(a.t_, s)); }
  friend Tensor operator+(double s, const Tensor &a) { return a + s; }
  friend Tensor operator-(const Tensor &a, double s) { return made(loom_add_scalar(a.t_, -s)); }
  friend Tensor operator-(double s, const Tensor &a) { return made(loom_rsub_scalar(a.t_, s)); }
  friend Tensor operator*(const Tensor &a, double s) { return made(loom_mul_scalar(a.t_, s)); }
  friend Tensor operator*(double s, const Tensor &a) { return a * s; }
  friend Tensor operator/(const Tensor &a, double s) { return made(loom_mul_scalar(a.t_, 1.0 / s)); }
  friend Tensor operator/(double s, const Tensor &a) { return made(loom_rdiv_scalar(a.t_, s)); }
  friend Tensor operator-(const Tensor &a) { return made(loom_neg(a.t_)); }

 private:
  explicit Tensor(loom_tensor *t) : t_(t) {}
  loom_tensor *t_ = nullptr;
};

/* ---- making tensors ---------------------------------------------------------------------- */
inline Tensor zeros(std::vector<int64_t> s, loom_dtype dt = LOOM_F32, loom_device dev = loom_cpu()) {
  return Tensor::made(loom_zeros(static_cast<int>(s.size()), s.data(), dt, dev));
}
inline Tensor ones(std::vector<int64_t> s, loom_dtype dt = LOOM_F32, loom_device dev = loom_cpu()) {
  return Tensor::made(loom_ones(static_cast<int>(s.size()), s.data(), dt, dev));
}
inline Tensor full(std::vector<int64_t> s, double v, loom_dtype dt = LOOM_F32, loom_device dev = loom_cpu()) {
  return Tensor::made(loom_full(static_cast<int>(s.size()), s.data(), v, dt, dev));
}
/* U(0, 1) / N(0, 1) from loom's generator (loom_manual_seed). */
inline Tensor rand(std::vector<int64_t> s, loom_dtype dt = LOOM_F32, loom_device dev = loom_cpu()) {
  return Tensor::made(loom_rand(static_cast<int>(s.size()), s.data(), dt, dev));
}
inline Tensor randn(std::vector<int64_t> s, loom_dtype dt = LOOM_F32, loom_device dev = loom_cpu()) {
  return Tensor::made(loom_randn(static_cast<int>(s.size()), s.data(), dt, dev));
}
inline Tensor arange(double start, double end, double step = 1.0, loom_dtype dt = LOOM_F32,
                     loom_device dev = loom_cpu()) {
  return Tensor::made(loom_arange(start, end, step, dt, dev));
}
/* A copy of host values (row-major) with the given shape. */
template <class T>
inline Tensor from_vector(const std::vector<T> &v, std::vector<int64_t> s, loom_device dev = loom_cpu()) {
  return Tensor::made(loom_from_host(v.data(), static_cast<int>(s.size()), s.data(), Tensor::host_dtype<T>(), dev));
}
inline Tensor cat(const std::vector<Tensor> &ts, int dim = 0) {
  std::vector<loom_tensor *> h;
  for (const Tensor &t : ts) h.push_back(t.get());
  return Tensor::made(loom_cat(static_cast<int>(h.size()), h.data(), dim));
}
inline Tensor matmul(const Tensor &a, const Tensor &b) { return a.matmul(b); }
inline Tensor relu(const Tensor &x) { return x.relu(); }
/* Mean cross-entropy of logits [N, C] against integer labels [N]. */
inline Tensor cross_entropy(const Tensor &logits, const Tensor &labels) {
  return Tensor::made(loom_cross_entropy(logits.get(), labels.get()));
}
inline int64_t count_correct(const Tensor &logits, const Tensor &labels) {
  int64_t n = 0;
  if (loom_count_correct(logits.get(), labels.get(), &n) != LOOM_OK) detail::fail();
  return n;
}

/* Grad mode off for this scope's lifetime (this thread). */
class NoGrad {
 public:
  NoGrad() : prev_(loom_set_grad_enabled(false)) {}
  ~NoGrad() { loom_set_grad_enabled(prev_); }
  NoGrad(const NoGrad &) = delete;
  NoGrad &operator=(const NoGrad &) = delete;

 private:
  bool prev_;
};

/* ---- modules ------------------------------------------------------------------------------ */
class Module {
 public:
  Module() = default;
  Module(Module &&o) noexcept : m_(std::exchange(o.m_, nullptr)), owned_(o.owned_) {}
  Module &operator=(Module &&o) noexcept {
    if (this != &o) {
      reset();
      m_ = std::exchange(o.m_, nullptr);
      owned_ = o.owned_;
    }
    return *this;
  }
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  ~Module() { reset(); }

  /* Take ownership of a module a loom call made (NULL: the call failed). */
  static Module made(loom_module *m) {
    if (!m) detail::fail();
    return Module(m, true);
  }
  /* A view of a module someone else owns (a container's child). */
  static Module borrow(loom_module *m) { return Module(m, false); }

  static Module linear(int64_t in, int64_t out, bool bias = true, loom_init init = LOOM_INIT_DEFAULT,
                       loom_device dev = loom_cpu()) {
    return made(loom_linear_new(in, out, bias, init, dev));
  }
  static Module relu() { return made(loom_relu_new()); }
  static Module sequential() { return made(loom_sequential_new()); }
  static Module mlp(int64_t in, std::vector<int64_t> hidden, int64_t out, loom_device dev = loom_cpu()) {
    return made(loom_mlp_new(in, static_cast<int>(hidden.size()), hidden.data(), out, dev));
  }
  static Module conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
                       bool bias = true, loom_device dev = loom_cpu()) {
    loom_conv2d_options o;
    loom_conv2d_options_init(&o);
    o.stride[0] = o.stride[1] = stride;
    o.padding[0] = o.padding[1] = padding;
    return made(loom_conv2d_new(in, out, kernel, kernel, &o, bias, LOOM_INIT_DEFAULT, dev));
  }
  static Module batch_norm2d(int64_t features, loom_device dev = loom_cpu()) {
    return made(loom_batch_norm2d_new(features, nullptr, true, dev));
  }
  /* "resnet20", ..., "resnet152"; num_classes / in_channels as in loom_resnet_options (<= 0: default). */
  static Module resnet(const std::string &arch, int64_t num_classes = 0, int64_t in_channels = 0,
                       loom_device dev = loom_cpu()) {
    loom_resnet_arch a;
    if (loom_resnet_parse(arch.c_str(), &a) != LOOM_OK) {
      detail::fail();
      return Module();
    }
    loom_resnet_options o;
    loom_resnet_options_init(&o, a);
    if (num_classes > 0) o.num_classes = num_classes;
    if (in_channels > 0) o.in_channels = in_channels;
    return made(loom_resnet_new(a, &o, dev));
  }
  /* A module whose forward is fn(self, x): register what it owns with
   * register_module / register_parameter; loom names, trains, checkpoints
   * and casts it like its own layers (loom_module_new). An exception from
   * fn becomes the forward's loom error. */
  using ForwardFn = std::function<Tensor(Module &self, const Tensor &x)>;
  static Module custom(const std::string &name, ForwardFn fn) {
    auto *f = new ForwardFn(std::move(fn));
    loom_module *m = loom_module_new(name.c_str(), &custom_forward, f, &custom_destroy);
    if (!m) delete f;
    return made(m);
  }

  loom_module *get() const noexcept { return m_; }
  explicit operator bool() const noexcept { return m_ != nullptr; }
  /* Give up ownership (e.g. to a C container); returns the handle. */
  loom_module *release() noexcept {
    owned_ = false;
    return m_;
  }

  /* In a scope of its own: the layers' intermediates die here. */
  Tensor forward(const Tensor &x) const {
    loom_scope_begin();
    loom_tensor *y = loom_module_forward(m_, x.get());
    if (y) loom_keep(y);
    loom_scope_end();
    return Tensor::made(y);
  }
  Tensor operator()(const Tensor &x) const { return forward(x); }

  /* Sequential: append child (ownership passes to the container). */
  loom_status append(Module &&child) { return detail::check(loom_sequential_add(m_, child.release())); }
  loom_status register_module(const std::string &name, Module &&child) {
    return detail::check(loom_module_register_module(m_, name.c_str(), child.release()));
  }
  loom_status register_parameter(const std::string &name, const Tensor &t) {
    return detail::check(loom_module_register_parameter(m_, name.c_str(), t.get()));
  }
  loom_status register_buffer(const std::string &name, const Tensor &t) {
    return detail::check(loom_module_register_buffer(m_, name.c_str(), t.get()));
  }

  std::string name() const { return loom_module_name(m_); }
  int num_children() const { return loom_module_num_children(m_); }
  Module child(int i) const { return borrow(loom_module_child(m_, i)); }
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> out;
    for (int i = 0; i < loom_module_num_params(m_); i++) out.push_back(Tensor::borrow(loom_module_param(m_, i)));
    return out;
  }
  /* (dotted name, tensor) as PyTorch's named_parameters(). */
  std::vector<std::pair<std::string, Tensor>> named_parameters() const {
    std::vector<std::pair<std::string, Tensor>> out;
    char buf[512];
    for (int i = 0; i < loom_module_num_params(m_); i++) {
      if (!loom_module_param_name(m_, i, buf, sizeof buf)) detail::fail();
      out.emplace_back(buf, Tensor::borrow(loom_module_param(m_, i)));
    }
    return out;
  }
  int64_t num_parameters() const { return loom_module_num_param_elements(m_); }
  loom_status train(bool on = true) { return detail::check(loom_module_train(m_, on)); }
  loom_status eval() { return train(false); }
  bool training() const { return loom_module_is_training(m_); }
  loom_status set_precision(loom_precision p, bool keep_last_fp32 = false) {
    return detail::check(loom_module_set_precision(m_, p, keep_last_fp32));
  }

 private:
  Module(loom_module *m, bool owned) : m_(m), owned_(owned) {}
  void reset() {
    if (m_ && owned_) loom_module_free(m_);
    m_ = nullptr;
  }
  static loom_tensor *custom_forward(void *user, loom_module *m, loom_tensor *x) {
#if LOOM_HPP_EXCEPTIONS
    try {
#endif
      Module self = borrow(m);
      Tensor y = (*static_cast<ForwardFn *>(user))(self, Tensor::borrow(x));
      /* Alive past this return: the forward's scope owns what it made; x and
       * borrowed tensors have their owners. loom keeps it for the caller. */
      return y.get();
#if LOOM_HPP_EXCEPTIONS
    } catch (const Error &e) {
      return loom_module_fail(e.status(), e.what());
    } catch (const std::exception &e) {
      return loom_module_fail(LOOM_ERR_STATE, e.what());
    } catch (...) {
      return loom_module_fail(LOOM_ERR_STATE, "forward threw a non-standard exception");
    }
#endif
  }
  static void custom_destroy(void *user) { delete static_cast<ForwardFn *>(user); }

  loom_module *m_ = nullptr;
  bool owned_ = false;
};

/* ---- optimizers --------------------------------------------------------------------------- */
class Optimizer {
 public:
  Optimizer() = default;
  Optimizer(Optimizer &&o) noexcept : o_(std::exchange(o.o_, nullptr)), params_(std::move(o.params_)) {}
  Optimizer &operator=(Optimizer &&o) noexcept {
    if (this != &o) {
      loom_optimizer_free(o_);
      o_ = std::exchange(o.o_, nullptr);
      params_ = std::move(o.params_);
    }
    return *this;
  }
  Optimizer(const Optimizer &) = delete;
  Optimizer &operator=(const Optimizer &) = delete;
  ~Optimizer() { loom_optimizer_free(o_); }

  static Optimizer sgd(std::vector<Tensor> params, double lr, double momentum = 0.0, double weight_decay = 0.0,
                       bool nesterov = false) {
    loom_sgd_options o;
    loom_sgd_options_init(&o);
    o.lr = lr, o.momentum = momentum, o.weight_decay = weight_decay, o.nesterov = nesterov;
    std::vector<loom_tensor *> h = handles(params);
    return Optimizer(loom_sgd_new(h.data(), static_cast<int>(h.size()), &o), std::move(params));
  }
  static Optimizer adamw(std::vector<Tensor> params, double lr = 1e-3, double weight_decay = 0.01) {
    loom_adamw_options o;
    loom_adamw_options_init(&o);
    o.lr = lr, o.weight_decay = weight_decay;
    std::vector<loom_tensor *> h = handles(params);
    return Optimizer(loom_adamw_new(h.data(), static_cast<int>(h.size()), &o), std::move(params));
  }
  /* SGD in two groups: conv/linear weights with weight_decay, BatchNorm
   * parameters and biases without (loom_sgd_new_for_module). */
  static Optimizer sgd_for_module(const Module &m, double lr, double momentum = 0.0, double weight_decay = 0.0,
                                  bool nesterov = false) {
    loom_sgd_options o;
    loom_sgd_options_init(&o);
    o.lr = lr, o.momentum = momentum, o.weight_decay = weight_decay, o.nesterov = nesterov;
    return Optimizer(loom_sgd_new_for_module(m.get(), &o), m.parameters());
  }

  loom_optimizer *get() const noexcept { return o_; }
  explicit operator bool() const noexcept { return o_ != nullptr; }
  loom_status step() { return detail::check(loom_optimizer_step(o_)); }
  loom_status zero_grad() { return detail::check(loom_optimizer_zero_grad(o_)); }
  void set_lr(double lr) { loom_optimizer_set_lr(o_, lr); }
  double lr() const { return loom_optimizer_get_lr(o_); }
  int64_t steps() const { return loom_optimizer_steps(o_); }
  /* Every step takes the schedule's lr at the next position, from `step`. */
  loom_status set_schedule(const loom_lr_schedule &s, int64_t step = 0) {
    return detail::check(loom_optimizer_set_schedule(o_, &s, step));
  }

 private:
  Optimizer(loom_optimizer *o, std::vector<Tensor> params) : o_(o), params_(std::move(params)) {
    if (!o_) detail::fail();
  }
  static std::vector<loom_tensor *> handles(const std::vector<Tensor> &ts) {
    std::vector<loom_tensor *> h;
    for (const Tensor &t : ts) h.push_back(t.get());
    return h;
  }
  loom_optimizer *o_ = nullptr;
  std::vector<Tensor> params_;  /* loom borrows them: they live as long as the optimizer */
};

inline void manual_seed(uint64_t seed) { loom_manual_seed(seed); }

}  // inline namespace
}  // namespace loom

#endif
