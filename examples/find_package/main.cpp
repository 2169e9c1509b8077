// Each worker contributes rank + 1; every worker prints the sum.
#include <ATen/ATen.h>

#include <iostream>

#include <lockstep/lockstep.h>

int main() {
  lockstep::Context ctx = lockstep::init();
  std::vector<at::Tensor> value{at::full({1}, ctx.world.rank + 1.0)};
  ctx.comm->allreduce(value, lockstep::ReduceOp::kSum)->wait();
  std::cout << "sum over " << ctx.world.worldSize << " ranks = " << value[0].item<double>() << std::endl;
  return 0;
}
