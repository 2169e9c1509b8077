// unused_worker — a worker process that trains tests/support/unused_scenario.h
// (parameters unused on some steps and on some ranks) with SGD + momentum and
// with AdamW, and compares its parameters with one process over the global
// batch.
//
//   unused_worker ddp|zero2|zero3 [TOLERANCE]
//
// Each rank prints "rank R <optimizer>: max relative difference D at <parameter>"
// and "ok" or "FAILED" against TOLERANCE (default 1e-5); exits 1 if any failed.
#include <cstdlib>
#include <iostream>
#include <string>

#include "lockstep/common/error.h"
#include "lockstep/rendezvous/init.h"
#include "support/unused_scenario.h"

using namespace lockstep;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: unused_worker ddp|zero2|zero3 [TOLERANCE]\n";
    return 2;
  }
  const std::string front = argv[1];
  const double tolerance = argc > 2 ? std::atof(argv[2]) : 1e-5;
  try {
    Context ctx = init();
    test::UnusedScenario scenario;
    if (front == "zero2") {
      scenario.front = test::UnusedFront::kZero2;
    } else if (front == "zero3") {
      scenario.front = test::UnusedFront::kZero3;
    } else if (front != "ddp") {
      std::cerr << "unused_worker: unknown front '" << front << "' (ddp, zero2 or zero3)\n";
      return 2;
    }
    bool failed = false;
    for (const char* optimizer : {"sgd", "adamw"}) {
      scenario.optimizer = optimizer;
      test::UnusedResult r = test::runUnusedScenario(ctx.comm, scenario);
      const bool ok = r.maxRelativeDifference <= tolerance;
      failed = failed || !ok;
      std::cout << "rank " << ctx.comm->rank() << " " << optimizer << " " << front << " on " << ctx.comm->backendName()
                << ": max relative difference " << r.maxRelativeDifference << " at " << r.worst
                << (ok ? " ok" : " FAILED") << std::endl;
    }
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "unused_worker: " << e.what() << std::endl;
    return 1;
  }
}
