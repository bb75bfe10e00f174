// test_loom_hpp.cpp — include/loom/loom.hpp with exceptions (ctest cpp_loom_hpp;
// built with -std=c++17 -Wall -Wextra -Werror): Tensor copies retain and
// destruction releases (loom's allocator is back where it started), a Scope
// owns what C code makes inside it while Tensors keep their own references,
// operators / reductions / item() against hand-computed values, errors as
// loom::Error with loom's status and message (also from a C++ forward
// inside a custom module), modules and optimizers training, custom modules
// named like PyTorch's. Prints "loom.hpp: ok".
#include <loom/loom.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static int g_failures = 0;
#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                         \
    }                                                                       \
  } while (0)

static int64_t allocated() {
  loom_memory_stats s{};
  s.struct_size = sizeof s;
  if (loom_memory_stats_get(loom_cpu(), &s) != LOOM_OK) return -1;
  return s.allocated_bytes[0].current;
}

static void tensors_own_references() {
  int64_t before = allocated();
  {
    loom::Tensor a = loom::full({256}, 2.0);
    loom::Tensor b = a;               // retain: the same tensor
    CHECK(b.get() == a.get());
    { loom::Tensor gone = std::move(a); }  // moved-from a is empty, gone released one reference
    CHECK(!a);
    CHECK(b.to_vector<float>()[255] == 2.0f);  // still alive through b
    CHECK(allocated() > before);
  }
  CHECK(allocated() == before);
  // Inside a Scope the scope owns what loom makes; a Tensor still keeps its own reference.
  loom::Tensor kept;
  {
    loom::Scope scope;
    auto x = loom::randn({8, 4});
    kept = (x * x).sum();
    CHECK(loom_scope_depth() == 1);
  }
  CHECK(loom_scope_depth() == 0);
  CHECK(kept.ndim() == 0 && kept.item() > 0.0);
  kept = loom::Tensor();
  CHECK(allocated() == before);
}

static void operators_and_item() {
  auto a = loom::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = loom::from_vector<float>({10, 20, 30}, {3});
  CHECK((a + b).to_vector<float>() == (std::vector<float>{11, 22, 33, 14, 25, 36}));  // broadcast
  CHECK(((2.0 - a) * 3.0).to_vector<float>()[0] == 3.0f);
  CHECK((a / 2.0).sum().item() == 10.5);
  CHECK((-a).max().item() == -1.0);
  CHECK(a.mean({1}).to_vector<float>() == (std::vector<float>{2, 5}));
  CHECK(a.matmul(a.transpose(0, 1)).to_vector<float>() == (std::vector<float>{14, 32, 32, 77}));
  CHECK(a.reshape({3, -1}).shape() == (std::vector<int64_t>{3, 2}));
  CHECK(loom::cat({a, a}, 0).shape() == (std::vector<int64_t>{4, 3}));
  CHECK(std::fabs(a.softmax(1).sum().item() - 2.0) < 1e-6);
  CHECK(a.argmax(1).to_vector<int64_t>() == (std::vector<int64_t>{2, 2}));
  loom::manual_seed(7);
  double s = (loom::randn({8, 4}) * loom::randn({8, 4})).sum().item();  // the line
  CHECK(std::isfinite(s));
}

static void errors_carry_loom_messages() {
  bool thrown = false;
  try {
    loom::zeros({2, 3}) + loom::zeros({4, 5});
  } catch (const loom::Error &e) {
    thrown = true;
    CHECK(e.status() == LOOM_ERR_SHAPE);
    CHECK(std::string(e.what()).find("add") != std::string::npos);
  }
  CHECK(thrown);
  thrown = false;
  try {
    loom::Module::resnet("resnet7");
  } catch (const loom::Error &e) {
    thrown = std::string(e.what()).find("unknown model 'resnet7'") != std::string::npos;
  }
  CHECK(thrown);
  thrown = false;
  try {
    loom::zeros({2, 2}).item();
  } catch (const loom::Error &e) {
    thrown = e.status() != LOOM_OK;
  }
  CHECK(thrown);
}

static void modules_and_optimizers() {
  int64_t before = allocated();
  {
    loom::manual_seed(1);
    auto mlp = loom::Module::mlp(4, {32}, 3);
    auto opt = loom::Optimizer::adamw(mlp.parameters(), 1e-2);
    auto y = loom::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
    auto x = loom::randn({8, 4});
    double first = 0, last = 0;
    for (int step = 0; step < 60; step++) {
      loom::Scope scope;
      auto loss = loom::cross_entropy(mlp(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item();
    }
    CHECK(last < 0.5 * first);
    CHECK(opt.steps() == 60);
    {
      loom::NoGrad ng;
      CHECK(!mlp(x).requires_grad());
    }
    // A Sequential takes ownership of what is appended.
    auto seq = loom::Module::sequential();
    seq.append(loom::Module::linear(4, 8));
    seq.append(loom::Module::relu());  // fused into the Linear
    seq.append(loom::Module::linear(8, 2));
    CHECK(seq.num_children() == 2 && seq.child(0).name() == "Linear(4, 8, relu)");
    CHECK(seq(x).shape() == (std::vector<int64_t>{8, 2}));
    auto net = loom::Module::resnet("resnet20", 10, 1);
    CHECK(net.named_parameters()[0].first == "conv1.weight");
    CHECK(net(loom::randn({2, 1, 16, 16})).shape() == (std::vector<int64_t>{2, 10}));
  }
  CHECK(allocated() == before);
}

static void custom_modules() {
  int64_t before = allocated();
  {
    loom::manual_seed(2);
    auto scale = loom::full({2}, 3.0).requires_grad_();
    auto net = loom::Module::custom("Scaled", [&scale](loom::Module &self, const loom::Tensor &x) {
      return self.child(0)(x) * scale;
    });
    net.register_module("fc", loom::Module::linear(3, 2));
    net.register_parameter("scale", scale);
    auto names = net.named_parameters();
    CHECK(names.size() == 3 && names[0].first == "scale" && names[1].first == "fc.weight");
    auto x = loom::randn({5, 3});
    auto y = net(x);
    auto ref = net.child(0)(x) * 3.0;
    CHECK(std::fabs((y - ref).pow(2.0).sum().item()) < 1e-10);
    y.sum().backward();
    CHECK(scale.grad() && scale.grad().numel() == 2);
    auto opt = loom::Optimizer::sgd(net.parameters(), 0.1, 0.9);
    CHECK(opt.step() == LOOM_OK);
    // An exception in the forward comes back as loom::Error with its message.
    auto bad = loom::Module::custom("Bad", [](loom::Module &, const loom::Tensor &) -> loom::Tensor {
      throw std::runtime_error("no forward today");
    });
    bool thrown = false;
    try {
      bad(x);
    } catch (const loom::Error &e) {
      thrown = std::string(e.what()).find("no forward today") != std::string::npos;
    }
    CHECK(thrown);
  }
  CHECK(allocated() == before);
}

int main() {
  tensors_own_references();
  operators_and_item();
  errors_carry_loom_messages();
  modules_and_optimizers();
  custom_modules();
  if (g_failures) {
    std::fprintf(stderr, "loom.hpp: %d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("loom.hpp: ok\n");
  return 0;
}
