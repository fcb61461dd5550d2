#include "server/common/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
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

absl::Status CheckTcpBindable(const Address& address) {
  if (address.is_unix || address.port == 0) return absl::OkStatus();
  const std::string where =
      address.ipv6 ? absl::StrCat("[", address.host, "]:", address.port) : absl::StrCat(address.host, ":", address.port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (const int e = ::getaddrinfo(address.host.empty() ? nullptr : address.host.c_str(), port.c_str(), &hints, &found);
      e != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address.host, ": ", ::gai_strerror(e)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const int bound = ::bind(fd, a->ai_addr, a->ai_addrlen);
    const int error = errno;
    ::close(fd);
    if (bound != 0) return absl::UnavailableError(absl::StrCat("cannot bind ", where, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace devplace
