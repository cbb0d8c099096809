package policy

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// Metadata services outside the link-local ranges, and IPv4 addresses reached through an IPv6
// translation (NAT64, 6to4), are refused like the addresses they are.
func TestEgressMetadataAndCarriedAddresses(t *testing.T) {
	cases := []struct {
		name    string
		egress  Egress
		address string
		refused string // "" when admitted; else a part of the error
	}{
		{"AWS IPv6 metadata", Egress{}, "fd00:ec2::254", "fd00:ec2::254 is a cloud metadata service"},
		{"Alibaba metadata", Egress{}, "100.100.100.200", "100.100.100.200 is a cloud metadata service"},
		{"its neighbour", Egress{}, "100.100.100.201", ""},
		{"another ULA", Egress{}, "fd00:ec2::253", ""},
		{"an address allow names the metadata service", Egress{Allow: patterns(t, "100.100.100.200")}, "100.100.100.200", ""},
		{"NAT64 metadata", Egress{}, "64:ff9b::a9fe:a9fe", "carries the IPv4 address 169.254.169.254 (NAT64 64:ff9b::/96): address 169.254.169.254 is link-local"},
		{"NAT64 loopback", Egress{}, "64:ff9b::7f00:1", "carries the IPv4 address 127.0.0.1"},
		{"NAT64 Alibaba", Egress{}, "64:ff9b::6464:64c8", "100.100.100.200 is a cloud metadata service"},
		{"NAT64 public", Egress{}, "64:ff9b::5db8:d822", ""},
		{"NAT64 denied by address", Egress{Deny: patterns(t, "10.96.0.0/12")}, "64:ff9b::a60:1", "10.96.0.1 is refused by the controller's --deny-url"},
		{"local NAT64 /48", Egress{}, "64:ff9b:1:a9fe:a9:fe00::", "169.254.169.254 (NAT64 64:ff9b:1::/48)"},
		{"local NAT64 /56", Egress{}, "64:ff9b:1:a9:fe:a9fe::", "169.254.169.254"},
		{"local NAT64 /64", Egress{}, "64:ff9b:1:0:a9:fea9:fe00:0", "169.254.169.254"},
		{"local NAT64 /96", Egress{}, "64:ff9b:1::a9fe:a9fe", "169.254.169.254"},
		{"local NAT64 public", Egress{}, "64:ff9b:1::5db8:d822", ""},
		{"local NAT64, all zero", Egress{}, "64:ff9b:1::", "carries the IPv4 address 0.0.0.0"},
		{"6to4 metadata", Egress{}, "2002:a9fe:a9fe::1", "169.254.169.254 (6to4 2002::/16)"},
		{"6to4 public", Egress{}, "2002:5db8:d822::1", ""},
		{"dev admits carried loopback", Egress{Loopback: true}, "64:ff9b::7f00:1", ""},
		{"dev refuses carried link-local", Egress{Loopback: true}, "64:ff9b::a9fe:a9fe", "link-local"},
		{"an allow of the NAT64 range does not admit what it carries", Egress{Allow: patterns(t, "64:ff9b::/96")}, "64:ff9b::a9fe:a9fe", "link-local"},
		{"an allow of the NAT64 range admits a public address", Egress{Allow: patterns(t, "64:ff9b::/96")}, "64:ff9b::5db8:d822", ""},
		{"outside the allow list", Egress{Allow: patterns(t, "10.0.0.0/8")}, "64:ff9b::a00:1", "matches no --allow-url"},
		{"mapped metadata", Egress{}, "::ffff:100.100.100.200", "cloud metadata service"},
	}
	u, _ := url.Parse("https://mcp.example.com/mcp")
	for _, tc := range cases {
		r, err := tc.egress.Check(u, u.String())
		if err == nil {
			err = r.checkAddr(netip.MustParseAddr(tc.address))
		}
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: %s refused: %v", tc.name, tc.address, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %s: error %v, want one saying %q", tc.name, tc.address, err, tc.refused)
		}
	}
}
