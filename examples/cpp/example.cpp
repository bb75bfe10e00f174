// example.cpp — the README's "Use it from C++" program (include/loom/loom.hpp),
// built and run by ctest (example_cpp) and by scripts/check-install.sh
// against an installed loom, so it stays true. A module of our own (a
// Linear with a learned output gain, forward written in C++) learns a
// 3-class toy problem with AdamW; any failed loom call throws loom::Error.
#include <loom/loom.hpp>

#include <cstdio>

int main() try {
  loom::manual_seed(0);
  auto gain = loom::ones({3}).requires_grad_();
  auto net = loom::Module::custom("Scaled", [&gain](loom::Module &self, const loom::Tensor &x) {
    return self.child(0)(x) * gain;            // children and parameters registered below
  });
  net.register_module("mlp", loom::Module::mlp(4, {64}, 3));
  net.register_parameter("gain", gain);        // names: gain, mlp.0.weight, ... (PyTorch's)
  auto opt = loom::Optimizer::adamw(net.parameters(), 1e-2);

  auto labels = loom::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
  auto x = loom::randn({8, 4});
  double first = 0, loss_value = 0;
  for (int step = 0; step < 100; step++) {
    loom::Scope scope;                         // tensors made below die with it
    auto loss = loom::cross_entropy(net(x), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_value = loss.item();
    if (step == 0) first = loss_value;
  }
  std::printf("%lld parameters (%s first), loss %.3f -> %.3f\n", static_cast<long long>(net.num_parameters()),
              net.named_parameters()[0].first.c_str(), first, loss_value);
  if (!(loss_value < 0.5 * first)) {
    std::fprintf(stderr, "example.cpp: the loss did not fall\n");
    return 1;
  }
  std::printf("example.cpp: ok\n");
  return 0;
} catch (const loom::Error &e) {
  std::fprintf(stderr, "loom error %d: %s\n", static_cast<int>(e.status()), e.what());
  return 1;
}
