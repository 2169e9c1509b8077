// builtin_tasks.h — each built-in task file registers its own (tasks.cpp calls them).
#pragma once

#include "lockstep/train/task.h"

namespace lockstep::detail {

void addNamesTask(TaskRegistry& tasks);
void addImageTasks(TaskRegistry& tasks);

}  // namespace lockstep::detail
