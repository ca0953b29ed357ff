#include "trainer/train/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "common/error.h"

namespace segtrain::trainer {
namespace {

std::string address_text(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof(text));
  else if (addr->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text, sizeof(text));
  return text;
}

// `address` (numeric IPv4/IPv6 text) with `port`; false when it is not one.
bool parse_endpoint(const std::string& address, int port, sockaddr_storage& out, socklen_t& length) {
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

std::string interface_list() {
  std::string out;
  for (const auto& i : network_interfaces()) {
    out += (out.empty() ? "" : ", ") + i.name;
    if (!i.addresses.empty()) out += " " + i.addresses.front();
    if (!i.up) out += " (down)";
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string local_address_towards(const std::string& host, int port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw InputError(what + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> results(found, ::freeaddrinfo);
  std::string last_error = "no address";
  for (const addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    // connect() on a UDP socket only picks the route and the source address.
    const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!ok) last_error = address_text(a->ai_addr) + ": " + std::strerror(errno);
    ::close(fd);
    if (ok) return address_text(reinterpret_cast<const sockaddr*>(&local));
  }
  throw InputError(what + ": no local interface has a route to '" + host + "' (" + last_error + ")");
}

std::vector<NetworkInterface> network_interfaces() {
  std::vector<NetworkInterface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(list, ::freeifaddrs);
  auto entry = [&](const char* name) -> NetworkInterface& {
    for (auto& i : out)
      if (i.name == name) return i;
    out.push_back({name, {}, false});
    return out.back();
  };
  for (const ifaddrs* i = list; i; i = i->ifa_next) entry(i->ifa_name).up = (i->ifa_flags & IFF_UP) != 0;
  for (int family : {AF_INET, AF_INET6})  // IPv4 addresses before IPv6 ones
    for (const ifaddrs* i = list; i; i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == family)
        entry(i->ifa_name).addresses.push_back(address_text(i->ifa_addr));
  return out;
}

std::string interface_address(const std::string& name, const std::string& what) {
  for (const auto& i : network_interfaces()) {
    if (i.name != name) continue;
    if (!i.up) throw InputError(what + ": network interface '" + name + "' is down");
    if (i.addresses.empty()) throw InputError(what + ": network interface '" + name + "' has no IP address");
    return i.addresses.front();
  }
  throw InputError(what + ": no network interface '" + name + "' on this host (interfaces: " + interface_list() + ")");
}

bool is_loopback_address(const std::string& address) {
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

ReachabilityListener::ReachabilityListener(const std::string& address) {
  sockaddr_storage at{};
  socklen_t length = 0;
  if (!parse_endpoint(address, 0, at, length))
    throw std::runtime_error("distributed: '" + address + "' is not an IP address to listen on");
  fd_ = ::socket(at.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&at), length) != 0 || ::listen(fd_, SOMAXCONN) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&at), &length) != 0) {
    const std::string why = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error("distributed: cannot listen on " + address + " for the peers' reachability check: " + why);
  }
  port_ = ntohs(at.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&at)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&at)->sin6_port);
}

ReachabilityListener::~ReachabilityListener() {
  if (fd_ >= 0) ::close(fd_);
}

std::string try_connect(const std::string& address, int port, std::chrono::steady_clock::time_point deadline) {
  sockaddr_storage to{};
  socklen_t length = 0;
  if (!parse_endpoint(address, port, to, length)) return "'" + address + "' is not an IP address";
  const int fd = ::socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  std::string why;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), length) != 0) {
    if (errno != EINPROGRESS) {
      why = std::strerror(errno);
    } else {
      // A peer behind a firewall that drops packets never answers: the kernel
      // would retry for about two minutes; the deadline decides instead.
      for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{fd, POLLOUT, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) {
          why = std::strerror(errno);
        } else if (ready == 0) {
          why = "no answer (connection timed out)";
        } else {
          int error = 0;
          socklen_t size = sizeof(error);
          if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
          if (error != 0) why = std::strerror(error);
        }
        break;
      }
    }
  }
  ::close(fd);
  return why;
}

bool gloo_connects_to(const std::string& self, const std::string& peer) {
  sockaddr_storage a{}, b{};
  socklen_t la = 0, lb = 0;
  if (!parse_endpoint(self, 0, a, la) || !parse_endpoint(peer, 0, b, lb) || a.ss_family != b.ss_family) return false;
  const int order = a.ss_family == AF_INET
                        ? std::memcmp(&reinterpret_cast<sockaddr_in*>(&a)->sin_addr,
                                      &reinterpret_cast<sockaddr_in*>(&b)->sin_addr, sizeof(in_addr))
                        : std::memcmp(&reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr,
                                      &reinterpret_cast<sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr));
  return order > 0;
}

}  // namespace segtrain::trainer
