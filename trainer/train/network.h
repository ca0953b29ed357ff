#pragma once
// Which local address a rank shows the other ranks (c10d_group.cpp binds the
// Gloo device to it): plain POSIX sockets and getifaddrs, no LibTorch.
#include <chrono>
#include <string>
#include <vector>

namespace segtrain::trainer {

// The local address the kernel would use to reach host:port, as text
// ("10.231.8.2", "::1"): a UDP socket is connect()ed there (no packet is sent)
// and getsockname() read back. `host` is a name or an IPv4/IPv6 address,
// resolved with getaddrinfo; the first of its addresses with a route wins. For
// a loopback host this is a loopback address. InputError starting with `what`
// (e.g. "MASTER_ADDR=node0") when the name does not resolve or no route leads
// to any of its addresses.
std::string local_address_towards(const std::string& host, int port, const std::string& what);

struct NetworkInterface {
  std::string name;
  std::vector<std::string> addresses;  // IPv4 first, then IPv6, as text
  bool up = false;
};

// This host's (this network namespace's) interfaces, in the kernel's order.
std::vector<NetworkInterface> network_interfaces();

// Checks that `name` is an interface that is up and has an address, and returns
// that address (the first IPv4 one, else the first IPv6 one). InputError
// starting with `what` (e.g. "GLOO_SOCKET_IFNAME=eth1") naming the interface
// and listing the host's interfaces otherwise.
std::string interface_address(const std::string& name, const std::string& what);

// 127.0.0.0/8, ::1 and IPv4-mapped loopback.
bool is_loopback_address(const std::string& address);

// A listening TCP socket on `address`, port chosen by the kernel, that the other
// ranks connect to before Gloo does, to learn whether they can reach this rank at
// the address it advertises. The kernel completes their handshakes; nothing is
// accepted or read. Closed with the object. std::runtime_error when it cannot listen.
class ReachabilityListener {
 public:
  explicit ReachabilityListener(const std::string& address);
  ~ReachabilityListener();
  ReachabilityListener(const ReachabilityListener&) = delete;
  ReachabilityListener& operator=(const ReachabilityListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Opens (and closes) a TCP connection to address:port, giving up at `deadline`:
// "" when it connected, else why not ("no answer (connection timed out)",
// "Connection refused", ...).
std::string try_connect(const std::string& address, int port, std::chrono::steady_clock::time_point deadline);

// Whether Gloo's TCP transport makes the rank at `self` open the connection to
// the rank at `peer`: it compares the two addresses byte by byte and the larger
// one connects (gloo/transport/tcp/device.cc, Device::isInitiator). False for
// equal addresses (one host: Gloo then compares ports) and mixed families.
bool gloo_connects_to(const std::string& self, const std::string& peer);

}  // namespace segtrain::trainer
