// An environment variable set (or unset) for a scope and restored after: for the code a test runs in
// its own process (the clients' environment capture) and for the children it starts (a daemon and its
// probe child, which read e.g. FAKE_NVML_CONFIG, the fake NVML's script).
#ifndef DEVPLACE_TESTS_COMMON_SCOPED_ENV_H_
#define DEVPLACE_TESTS_COMMON_SCOPED_ENV_H_

#include <string>

namespace devplace::testing {

// Sets `name` to `value`, or unsets it when `value` is nullptr, until the object goes away; then
// restores the value it had, or unsets it when it had none. setenv/unsetenv: not thread-safe, so a
// test sets its variables before it starts threads or children that read them.
class ScopedEnv {
 public:
  ScopedEnv(const std::string& name, const char* value);
  ScopedEnv(const std::string& name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_SCOPED_ENV_H_
