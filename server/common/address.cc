#include "server/common/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace devplace {
namespace {

constexpr absl::string_view kNameChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_";

// An IPv6 address as written between brackets: hex digits, ':' and '.', then an optional zone
// ("%eth0").
bool PlausibleIpv6(absl::string_view v6) {
  const size_t percent = v6.find('%');
  const absl::string_view address = v6.substr(0, percent);
  if (address.empty() || address.find_first_not_of("0123456789abcdefABCDEF:.") != absl::string_view::npos) {
    return false;
  }
  if (percent == absl::string_view::npos) return true;
  const absl::string_view zone = v6.substr(percent + 1);
  return !zone.empty() && zone.find_first_not_of(kNameChars) == absl::string_view::npos;
}

}  // namespace

std::optional<Address> ParseAddress(absl::string_view text, AddressUse use) {
  Address address;
  if (absl::ConsumePrefix(&text, "unix:")) {
    if (use == AddressUse::kDial && absl::StartsWith(text, "///")) text.remove_prefix(2);
    if (text.size() < 2 || text[0] != '/' || text[1] == '/') return std::nullopt;
    address.is_unix = true;
    address.path = std::string(text);
    return address;
  }
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return std::nullopt;
  const absl::string_view host = text.substr(0, colon), port = text.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &address.port) || address.port > 65535 ||
      address.port < (use == AddressUse::kDial ? 1 : 0)) {
    return std::nullopt;
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']' || !PlausibleIpv6(host.substr(1, host.size() - 2))) return std::nullopt;
    address.ipv6 = true;
    address.host = std::string(host.substr(1, host.size() - 2));
    return address;
  }
  if (host.find_first_not_of(kNameChars) != absl::string_view::npos) return std::nullopt;
  address.host = std::string(host);
  return address;
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace devplace
