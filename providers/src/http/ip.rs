//! IP networks and the ranges the guarded client refuses: [`IpNet`] (CIDR parsing and
//! membership) and [`is_forbidden`]. Pure functions, no I/O.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network in CIDR notation (`10.0.0.0/8`, `::1/128`); a bare address is a `/32` or `/128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// A network of `addr` with `prefix` bits (clamped to the address width).
    pub fn new(addr: IpAddr, prefix: u8) -> Self {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        Self {
            addr,
            prefix: prefix.min(max),
        }
    }

    /// Whether `ip` is inside the network (IPv4-mapped IPv6 addresses match IPv4 networks).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A CIDR that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid IP network {0:?} (expected an address or CIDR such as 127.0.0.1/32)")]
pub struct InvalidIpNet(pub String);

impl FromStr for IpNet {
    type Err = InvalidIpNet;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidIpNet(s.to_owned());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(bad)?,
            None => max,
        };
        Ok(Self { addr, prefix })
    }
}

impl From<IpAddr> for IpNet {
    fn from(addr: IpAddr) -> Self {
        Self::new(addr, 128)
    }
}

/// An IPv4-mapped or IPv4-compatible IPv6 address as the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

const FORBIDDEN_V4: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8),       // "this network"
    (Ipv4Addr::new(10, 0, 0, 0), 8),      // private
    (Ipv4Addr::new(100, 64, 0, 0), 10),   // shared address space (CGNAT)
    (Ipv4Addr::new(127, 0, 0, 0), 8),     // loopback
    (Ipv4Addr::new(169, 254, 0, 0), 16),  // link-local (cloud metadata lives here)
    (Ipv4Addr::new(172, 16, 0, 0), 12),   // private
    (Ipv4Addr::new(192, 0, 0, 0), 24),    // IETF protocol assignments
    (Ipv4Addr::new(192, 0, 2, 0), 24),    // documentation
    (Ipv4Addr::new(192, 168, 0, 0), 16),  // private
    (Ipv4Addr::new(198, 18, 0, 0), 15),   // benchmarking
    (Ipv4Addr::new(198, 51, 100, 0), 24), // documentation
    (Ipv4Addr::new(203, 0, 113, 0), 24),  // documentation
    (Ipv4Addr::new(224, 0, 0, 0), 4),     // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4),     // reserved, broadcast
];

const FORBIDDEN_V6: &[(Ipv6Addr, u8)] = &[
    (Ipv6Addr::UNSPECIFIED, 128),                         // ::
    (Ipv6Addr::LOCALHOST, 128),                           // ::1
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96),  // NAT64 (may embed a private v4)
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),      // discard
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),      // unique local
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),     // link-local
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),     // site-local (deprecated)
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),      // multicast
];

/// Whether `ip` is in a range the guarded client refuses (see the module table).
///
/// ```
/// use botmesh_providers::http::is_forbidden;
/// assert!(is_forbidden("169.254.169.254".parse().unwrap()));
/// assert!(is_forbidden("::ffff:10.1.2.3".parse().unwrap()));
/// assert!(!is_forbidden("149.154.167.220".parse().unwrap()));
/// ```
pub fn is_forbidden(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => FORBIDDEN_V4
            .iter()
            .any(|(net, p)| IpNet::new(IpAddr::V4(*net), *p).contains(IpAddr::V4(v4))),
        IpAddr::V6(v6) => {
            // IPv4-compatible (::a.b.c.d, deprecated) carries a v4 address too.
            let seg = v6.segments();
            if seg[..6].iter().all(|s| *s == 0) && !v6.is_loopback() && !v6.is_unspecified() {
                let [a, b] = seg[6].to_be_bytes();
                let [c, d] = seg[7].to_be_bytes();
                return is_forbidden(IpAddr::V4(Ipv4Addr::new(a, b, c, d)));
            }
            FORBIDDEN_V6
                .iter()
                .any(|(net, p)| IpNet::new(IpAddr::V6(*net), *p).contains(IpAddr::V6(v6)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn refuses_every_private_range() {
        for bad in [
            "127.0.0.1",
            "127.8.9.10",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:192.168.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(is_forbidden(ip(bad)), "{bad} should be refused");
        }
        for good in [
            "8.8.8.8",
            "172.15.255.255",
            "172.32.0.1",
            "149.154.167.220",
            "2a00:1450:4001::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_forbidden(ip(good)), "{good} should be permitted");
        }
    }

    #[test]
    fn cidr_parsing_and_membership() {
        let net: IpNet = "10.1.0.0/16".parse().expect("valid cidr");
        assert!(net.contains(ip("10.1.200.3")));
        assert!(!net.contains(ip("10.2.0.1")));
        let single: IpNet = "127.0.0.1".parse().expect("bare address");
        assert!(single.contains(ip("127.0.0.1")));
        assert!(single.contains(ip("::ffff:127.0.0.1")));
        assert!(!single.contains(ip("127.0.0.2")));
        assert!("10.0.0.0/33".parse::<IpNet>().is_err());
        assert!("nope".parse::<IpNet>().is_err());
        let all6: IpNet = "::/0".parse().expect("zero prefix");
        assert!(all6.contains(ip("::1")));
    }
}
