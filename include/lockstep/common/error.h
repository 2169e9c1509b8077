// lockstep/common/error.h — the two error channels.
//
// LOCKSTEP_CHECK* report a user's mistake (bad flag, bad file, inconsistent
// environment): they throw lockstep::Error with the caller's message (the
// failed condition when there is none), both values for the two-operand
// forms, and the source location. LOCKSTEP_ASSERT reports a bug in lockstep
// itself and throws lockstep::InternalError.
// Communication failures have their own type, lockstep::CommError
// (lockstep/common/comm_error.h), because callers may want to recover from them.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lockstep {

/// A user-facing error: the message says what was wrong and what was expected.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A configuration or environment error (a flag, a variable, a config key).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A broken invariant inside lockstep; please report it.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {

[[noreturn]] void throwCheckFailure(const char* file, int line, const char* condition, const std::string& message);
[[noreturn]] void throwAssertFailure(const char* file, int line, const char* condition, const std::string& message);

template <typename... Args>
std::string streamConcat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace detail
}  // namespace lockstep

/// Throws lockstep::Error unless `cond`; the remaining arguments are streamed into the message.
#define LOCKSTEP_CHECK(cond, ...)                                                                                      \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      ::lockstep::detail::throwCheckFailure(__FILE__, __LINE__, #cond, ::lockstep::detail::streamConcat(__VA_ARGS__)); \
    }                                                                                                                  \
  } while (0)

#define LOCKSTEP_CHECK_OP_(a, b, op, ...)                                                     \
  do {                                                                                        \
    const auto& lockstep_a_ = (a);                                                            \
    const auto& lockstep_b_ = (b);                                                            \
    if (!(lockstep_a_ op lockstep_b_)) {                                                      \
      ::lockstep::detail::throwCheckFailure(                                                  \
          __FILE__, __LINE__, #a " " #op " " #b,                                              \
          ::lockstep::detail::streamConcat(#a " = ", lockstep_a_, ", " #b " = ", lockstep_b_, \
                                           ". " __VA_OPT__(, ) __VA_ARGS__));                 \
    }                                                                                         \
  } while (0)

#define LOCKSTEP_CHECK_EQ(a, b, ...) LOCKSTEP_CHECK_OP_(a, b, ==, __VA_ARGS__)
#define LOCKSTEP_CHECK_NE(a, b, ...) LOCKSTEP_CHECK_OP_(a, b, !=, __VA_ARGS__)
#define LOCKSTEP_CHECK_LT(a, b, ...) LOCKSTEP_CHECK_OP_(a, b, <, __VA_ARGS__)
#define LOCKSTEP_CHECK_LE(a, b, ...) LOCKSTEP_CHECK_OP_(a, b, <=, __VA_ARGS__)
#define LOCKSTEP_CHECK_GE(a, b, ...) LOCKSTEP_CHECK_OP_(a, b, >=, __VA_ARGS__)
#define LOCKSTEP_CHECK_GT(a, b, ...) LOCKSTEP_CHECK_OP_(a, b, >, __VA_ARGS__)

/// Throws lockstep::InternalError unless `cond`: for lockstep's own invariants.
#define LOCKSTEP_ASSERT(cond, ...)                                                           \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      ::lockstep::detail::throwAssertFailure(__FILE__, __LINE__, #cond,                      \
                                             ::lockstep::detail::streamConcat(__VA_ARGS__)); \
    }                                                                                        \
  } while (0)
