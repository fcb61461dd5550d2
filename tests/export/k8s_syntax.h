// Kubernetes label syntax, written from the Kubernetes documentation ("Labels and Selectors":
// syntax and character set) independently of server/export, so the tests check the library
// against the spec rather than against itself.
#ifndef DEVPLACE_TESTS_EXPORT_K8S_SYNTAX_H_
#define DEVPLACE_TESTS_EXPORT_K8S_SYNTAX_H_

#include <regex>
#include <string>

namespace devplace::testing {

// A name segment or a value: 63 characters at most, beginning and ending with an alphanumeric
// character, with dashes, underscores, dots and alphanumerics between. Values may also be empty.
inline std::string CheckNameOrValue(const std::string& s, bool allow_empty) {
  static const std::regex kSyntax("[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?");
  if (s.empty()) return allow_empty ? "" : "empty name";
  if (s.size() > 63) return "longer than 63 characters: " + s;
  if (!std::regex_match(s, kSyntax)) return "bad characters or ends: " + s;
  return "";
}

// The prefix: a DNS subdomain (RFC 1123): at most 253 characters, dot-separated labels of
// lower-case alphanumerics and '-', each at most 63 and starting and ending alphanumeric.
inline std::string CheckPrefix(const std::string& prefix) {
  static const std::regex kLabel("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  if (prefix.empty() || prefix.size() > 253) return "prefix length: " + prefix;
  size_t start = 0;
  while (true) {
    const size_t dot = prefix.find('.', start);
    const std::string part = prefix.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.size() > 63 || !std::regex_match(part, kLabel)) return "prefix not a DNS subdomain: " + prefix;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return "";
}

// "" when key=value is a valid Kubernetes label, else why not.
inline std::string CheckLabel(const std::string& key, const std::string& value) {
  const size_t slash = key.find('/');
  std::string error;
  if (slash != std::string::npos) {
    error = CheckPrefix(key.substr(0, slash));
    if (error.empty()) error = CheckNameOrValue(key.substr(slash + 1), false);
  } else {
    error = CheckNameOrValue(key, false);
  }
  if (error.empty()) error = CheckNameOrValue(value, true);
  return error;
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_EXPORT_K8S_SYNTAX_H_
