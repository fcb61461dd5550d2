// libdevplace's trust rules for a daemon it did not get an explicit address for: who may own the
// unix socket and its directory (CheckUnixSocket) and the loopback TCP listener it falls back to
// (CheckLocalListener). The one C++ place for these rules; client/python/devplace/_target.py is the
// Python one, and both are tested against the same table (tests/client/trust_table.txt).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/common/bounded_read.h"
#include "client/connect_diagnosis.h"
#include "devplace/client.h"

namespace devplace {
namespace {

// Reading /proc/net/tcp{,6}: at most this much of each, within this time.
constexpr uint64_t kMaxTableBytes = 64 * reading::kMiB;
constexpr absl::Duration kTableTime = absl::Seconds(2);

// A TCP endpoint as /proc/net/tcp{,6} print it: the address in network byte order, 4 or 16 bytes.
struct Endpoint {
  bool v6 = false;
  uint8_t addr[16] = {};
  uint16_t port = 0;
};

// "0100007F:1D29" (tcp) or "00000000000000000000000001000000:1D29" (tcp6): each 32-bit word is the
// kernel's in-memory word printed in host order, so storing it back as a host-order uint32 gives
// the network-order bytes on any host.
bool ParseProcEndpoint(absl::string_view text, bool v6, Endpoint* out) {
  const std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(text, ':');
  const size_t words = v6 ? 4 : 1;
  if (parts.first.size() != words * 8) return false;
  out->v6 = v6;
  for (size_t i = 0; i < words; ++i) {
    uint32_t word = 0;
    if (!absl::SimpleHexAtoi(parts.first.substr(i * 8, 8), &word)) return false;
    std::memcpy(out->addr + i * 4, &word, 4);
  }
  uint32_t port = 0;
  if (!absl::SimpleHexAtoi(parts.second, &port) || port > 0xffff) return false;
  out->port = static_cast<uint16_t>(port);
  return true;
}

// Whether a listener bound to `bound` receives connections to `target` (same port): the same
// address, its family's wildcard, or for an IPv4 target an IPv6 wildcard or the v4-mapped address
// (a dual-stack socket; whether it is IPV6_V6ONLY is not shown, so it counts).
bool Receives(const Endpoint& bound, const Endpoint& target) {
  static constexpr uint8_t kZero[16] = {};
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (bound.port != target.port) return false;
  const size_t size = target.v6 ? 16 : 4;
  if (bound.v6 == target.v6) {
    return std::memcmp(bound.addr, target.addr, size) == 0 || std::memcmp(bound.addr, kZero, size) == 0;
  }
  if (!bound.v6) return false;  // an IPv4 socket never receives an IPv6 connection
  if (std::memcmp(bound.addr, kZero, 16) == 0) return true;
  return std::memcmp(bound.addr, kMapped, 12) == 0 &&
         (std::memcmp(bound.addr + 12, target.addr, 4) == 0 || std::memcmp(bound.addr + 12, kZero, 4) == 0);
}

}  // namespace

absl::Status CheckUnixSocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such socket"));
    if (errno == EACCES) {  // the cause first: gRPC would only say "Permission denied"
      return absl::FailedPreconditionError(absl::StrCat(
          "permission denied: a directory above ", path, " does not let this user (uid ", ::geteuid(),
          ") reach the socket; ",
          internal::PermissionFix("the host's operator lets the user search that directory (its mode or group)")));
    }
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  const uid_t me = ::geteuid();
  if (!S_ISSOCK(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a socket"));
  if (st.st_uid != 0 && st.st_uid != me) {
    return absl::FailedPreconditionError(absl::StrCat("socket ", path, " is owned by uid ", st.st_uid,
                                                      ", not root or you (uid ", me, "): refused as possibly squatted"));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat d;
  if (::stat(dir.empty() ? "." : dir.c_str(), &d) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": ", std::strerror(errno)));
  }
  if (d.st_uid != 0 && d.st_uid != me) {
    return absl::FailedPreconditionError(absl::StrCat("socket directory ", dir, " is owned by uid ", d.st_uid,
                                                      ", not root or you (uid ", me, "): refused as possibly squatted"));
  }
  if ((d.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (d.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket directory ", dir, " is writable by group or others without the sticky bit: refused, another "
        "user could have replaced the socket"));
  }
  return absl::OkStatus();
}

absl::Status CheckLocalListener(const std::string& address) {
  // "127.0.0.1:7465" or "[::1]:7465": numeric loopback only (a name could resolve elsewhere).
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  uint32_t port = 0;
  const bool port_ok = colon != std::string::npos && absl::SimpleAtoi(address.substr(colon + 1), &port) &&
                       port > 0 && port <= 0xffff;
  Endpoint target;
  in_addr v4;
  in6_addr v6;
  if (port_ok && inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) {
    std::memcpy(target.addr, &v4, 4);
  } else if (port_ok && inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6)) {
    target.v6 = true;
    std::memcpy(target.addr, &v6, 16);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("address '", address,
                                                   "': want a loopback host:port, e.g. 127.0.0.1:7465 or [::1]:7465"));
  }
  target.port = static_cast<uint16_t>(port);

  const uid_t me = ::geteuid();
  bool found = false;
  for (const bool v6_table : {false, true}) {
    const std::string table = v6_table ? "/proc/net/tcp6" : "/proc/net/tcp";
    if (v6_table && reading::StatPath(table).error != 0) continue;  // no IPv6 on this host
    // Streamed a line at a time (a busy host lists hundreds of thousands of sockets), bounded.
    reading::ReadBudget budget(kTableTime, kMaxTableBytes);
    bool header = true;
    absl::Status refused;
    const absl::StatusOr<reading::LinesEnd> end =
        reading::ReadLines(table, kMaxTableBytes, budget, [&](absl::string_view line) {
          if (header) {
            header = false;
            return true;
          }
          // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
          const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
          Endpoint bound;
          uint32_t uid = 0;
          if (f.size() < 8 || f[3] != "0A" || !ParseProcEndpoint(f[1], v6_table, &bound) ||
              !Receives(bound, target) || !absl::SimpleAtoi(f[7], &uid)) {
            return true;  // 0A: TCP_LISTEN
          }
          found = true;
          if (uid != 0 && uid != me) {
            refused = absl::FailedPreconditionError(absl::StrCat(
                "the listener on ", address, " is owned by uid ", uid, ", not root or you (uid ", me,
                "): refused as possibly an impersonator (name the address explicitly to trust it)"));
            return false;
          }
          return true;
        });
    if (!refused.ok()) return refused;
    if (!end.ok() || *end == reading::LinesEnd::kLimit) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read ", table, " to see who owns the listener on ", address, ": refused"));
    }
  }
  if (!found) return absl::NotFoundError(absl::StrCat(address, ": no listening socket"));
  return absl::OkStatus();
}

}  // namespace devplace
