//! Which addresses `web_fetch` may connect to (SSRF rules), and host name resolution.
//!
//! Only globally reachable unicast addresses are allowed. Refused: loopback, private (RFC 1918,
//! unique local `fc00::/7`), link-local (`169.254.0.0/16` with cloud metadata endpoints,
//! `fe80::/10`), unspecified and "this network" (`0.0.0.0/8`, `::`), shared address space
//! (`100.64.0.0/10`), benchmarking (`198.18.0.0/15`), documentation, multicast, broadcast and
//! reserved ranges, IPv6 site-local, and IPv6 forms that embed an IPv4 address
//! (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) when the embedded
//! address is refused.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use futures::future::BoxFuture;

/// Resolves host names for `web_fetch`. The default is the system resolver; tests (and
/// deployments with their own DNS policy) can supply another.
pub trait HostResolver: Send + Sync {
    /// All addresses of `host` with `port`.
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>>;
}

/// The operating system's resolver (`getaddrinfo`, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>> {
        let host = host.to_string();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

/// Why `ip` may not be fetched from, or `None` when it is a public address.
pub fn refused_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified (\"this network\")")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local (cloud metadata lives here)")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared address space (carrier-grade NAT)")
    } else if a == 192 && b == 0 && c == 0 {
        Some("IETF protocol assignments")
    } else if (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
    {
        Some("documentation")
    } else if a == 198 && (b == 18 || b == 19) {
        Some("benchmarking")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() || a >= 240 {
        Some("reserved")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    if let Some(v4) = embedded_v4(ip) {
        return refused_v4(v4);
    }
    let first = segments[0];
    if first & 0xfe00 == 0xfc00 {
        Some("private (unique local)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if first & 0xffc0 == 0xfec0 {
        Some("site-local")
    } else if first & 0xff00 == 0xff00 {
        Some("multicast")
    } else if first == 0x2001 && segments[1] == 0x0db8 {
        Some("documentation")
    } else if first == 0x0100 && segments[1..4] == [0, 0, 0] {
        Some("discard-only")
    } else if first & 0xe000 != 0x2000 {
        // Outside 2000::/3 nothing is global unicast today.
        Some("reserved")
    } else {
        None
    }
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), NAT64
/// (`64:ff9b::a.b.c.d`) or 6to4 (`2002:AABB:CCDD::`) address; `0.0.0.0` (refused) for the
/// deprecated IPv4-compatible form `::a.b.c.d`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    if s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] {
        // IPv4-compatible (deprecated): refused whatever it embeds.
        return Some(Ipv4Addr::UNSPECIFIED);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_internal_addresses() {
        for text in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            assert!(refused_address(ip).is_some(), "{text} should be refused");
        }
    }

    #[test]
    fn allows_public_addresses() {
        for text in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "2002:0808:0808::1",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(refused_address(ip), None, "{text} should be allowed");
        }
    }
}
