// test_loom_hpp_noexcept.cpp — include/loom/loom.hpp built with
// -fno-exceptions (ctest cpp_loom_hpp_noexcept): failures come back as
// empty Tensors / Modules, loom_status results and NaN items, with
// loom::last_error() saying what failed; the happy path works the same.
// Prints "loom.hpp noexcept: ok".
#include <loom/loom.hpp>

#include <cmath>
#include <cstdio>
#include <string>

static int g_failures = 0;
#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                         \
    }                                                                       \
  } while (0)

static_assert(LOOM_HPP_EXCEPTIONS == 0, "built without exceptions");

int main() {
  loom::Scope scope;
  auto bad = loom::zeros({2, 3}) + loom::zeros({4, 5});
  CHECK(!bad);
  CHECK(loom::last_status() == LOOM_ERR_SHAPE);
  CHECK(loom::last_error().find("add") != std::string::npos);
  CHECK(std::isnan(loom::zeros({2}).item()));
  auto net = loom::Module::resnet("resnet7");
  CHECK(!net && loom::last_error().find("resnet7") != std::string::npos);
  CHECK(loom::Tensor().backward() != LOOM_OK);
  auto x = loom::full({2, 2}, 1.5);
  double s = (x * x).sum().item();
  CHECK(s == 9.0);
  auto mlp = loom::Module::mlp(2, {4}, 2);
  auto opt = loom::Optimizer::sgd(mlp.parameters(), 0.1);
  auto loss = loom::cross_entropy(mlp(x), loom::from_vector<int64_t>({0, 1}, {2}));
  CHECK(loss && loss.backward() == LOOM_OK && opt.step() == LOOM_OK);
  if (g_failures) {
    std::fprintf(stderr, "loom.hpp noexcept: %d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("loom.hpp noexcept: ok\n");
  return 0;
}
