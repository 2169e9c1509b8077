// lockstep/comm/abandonable.h — a communicator whose waits also end when the group is given up.
//
// A member of an elastic generation (rendezvous/membership.h) learns of a lost peer when its own
// operation with that peer fails; one whose operation waits on a survivor that has already left
// the generation would learn it only at its deadline. withAbandonment() makes every wait on the
// wrapped communicator's operations check `abandoned` each `period` it spends waiting (never when
// the operation completes sooner), and fail with CommError kAborted, naming `why`, once it is
// true. The operation itself is left to the backend: the communicator is not to be used again.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "lockstep/comm/communicator.h"

namespace lockstep {

std::shared_ptr<Communicator> withAbandonment(std::shared_ptr<Communicator> inner, std::function<bool()> abandoned,
                                              std::string why,
                                              std::chrono::milliseconds period = std::chrono::milliseconds(50));

}  // namespace lockstep
