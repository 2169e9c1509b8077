#include "lockstep/common/error.h"

#include <cstring>

namespace lockstep::detail {
namespace {
const char* baseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throwCheckFailure(const char* file, int line, const char* condition, const std::string& message) {
  std::string text = message.empty() ? std::string("check failed: ") + condition : message;
  text += std::string(" [") + baseName(file) + ":" + std::to_string(line) + "]";
  throw Error(text);
}

void throwAssertFailure(const char* file, int line, const char* condition, const std::string& message) {
  std::string text = std::string("internal error: ") + condition + " is false";
  if (!message.empty()) text += ": " + message;
  text += std::string(" [") + baseName(file) + ":" + std::to_string(line) + "]; please report this as a lockstep bug";
  throw InternalError(text);
}

}  // namespace lockstep::detail
