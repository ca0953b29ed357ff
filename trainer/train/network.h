#pragma once
// Which local address a rank shows the other ranks (distributed.cpp binds the
// Gloo device to it): plain POSIX sockets and getifaddrs, no LibTorch.
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

}  // namespace segtrain::trainer
