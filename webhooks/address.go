package webhooks

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrAddressRefused is wrapped by the error of a connection refused because the endpoint's
// address is not a public one (webhooks.allow_private is false).
var ErrAddressRefused = errors.New("address refused")

// nonPublic are the ranges beyond those netip names (loopback, private, link-local,
// multicast, unspecified) that no storefront's public endpoint lives in: "this network",
// carrier-grade NAT, IETF protocol assignments, the documentation and benchmarking ranges,
// the reserved range and broadcast, NAT64 and the IPv6 documentation and discard prefixes.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Public reports whether ip is an address a storefront endpoint may be reached at with
// allow_private off: not loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local
// (169.254/16, the cloud metadata address among them, fe80::/10), multicast, unspecified, nor
// any range of nonPublic. An IPv4 address written in IPv6 (::ffff:10.0.0.1) is judged as the
// IPv4 address it is.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// dialControl is the net.Dialer Control of an endpoint's connections: it runs for each address
// the dialer is about to connect to, after DNS, so the address judged is the one connected to.
// A name that resolved to a public address when the configuration was checked and to a private
// one now (DNS rebinding) is refused here all the same.
func dialControl(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrAddressRefused, address, err)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("%w: %s is not an IP address", ErrAddressRefused, host)
		}
		if !Public(ip) {
			return fmt.Errorf("%w: %s is not a public address (loopback, private, link-local or reserved); set webhooks.allow_private: true to allow it",
				ErrAddressRefused, ip)
		}
		return nil
	}
}
