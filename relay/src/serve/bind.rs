//! Binding the event loops' sockets to one port, and only theirs.
//!
//! `SO_REUSEPORT` lets every socket of one effective user with the option
//! set join a port's group, and the kernel then spreads clients over all of
//! them: a second relay started by the same user on a busy port would start
//! without a word and take half the peers of every match. So:
//!
//! 1. A probe socket *without* `SO_REUSEPORT` is bound to the address first
//!    and closed: its bind fails if any socket holds the port (a relay, with
//!    or without the option, or anything else).
//! 2. The `n` loop sockets are bound with `SO_REUSEPORT`.
//! 3. On Linux, the kernel's socket table (`/proc/net/udp`, `udp6`) is read
//!    back: a socket bound to the same port and an overlapping address that
//!    is not one of ours means another process is in the group, and the
//!    bind fails. This closes the window between 1 and 2: of two relays
//!    starting at once, the one that checks later sees the other (both may
//!    fail, never both serve). It also covers port 0, where the kernel may
//!    pick a port another `SO_REUSEPORT` group already has.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// Binds `n` UDP sockets to `addr` with `SO_REUSEPORT` (the first one
/// picks the port if `addr`'s is 0; the others take the same), one per
/// event loop: the kernel spreads clients over them by address. Fails
/// when any other socket holds the port (see the module docs).
///
/// # Errors
/// [`io::ErrorKind::AddrInUse`] when another socket holds the port, with a
/// message for the user; any other error making or binding a socket.
pub fn bind_reuseport(addr: SocketAddr, n: usize) -> io::Result<Vec<UdpSocket>> {
    use socket2::{Domain, Protocol, Socket, Type};
    if addr.port() != 0 {
        drop(UdpSocket::bind(addr).map_err(|e| busy(addr, &e))?);
    }
    let mut out: Vec<UdpSocket> = Vec::with_capacity(n);
    let mut at = addr;
    for _ in 0..n.max(1) {
        let s = Socket::new(Domain::for_address(at), Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_port(true)?;
        s.bind(&at.into()).map_err(|e| busy(at, &e))?;
        let s: UdpSocket = s.into();
        at = s.local_addr()?;
        out.push(s);
    }
    if let Some(other) = sharer(at, &out) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another socket ({other}) shares UDP port {}: another relay runs there; \
                 only this relay's own event loops may use its port",
                at.port()
            ),
        ));
    }
    Ok(out)
}

/// A bind error, said plainly when it is a busy port.
fn busy(addr: SocketAddr, e: &io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::AddrInUse {
        io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{addr} is in use by another socket (another relay?): {e}"),
        )
    } else {
        io::Error::new(e.kind(), e.to_string())
    }
}

/// A socket bound to `at`'s port and an overlapping address that is none
/// of `ours`, from the kernel's table (Linux); `None` elsewhere or when the
/// table cannot be read (the probe bind still guards).
fn sharer(at: SocketAddr, ours: &[UdpSocket]) -> Option<SocketAddr> {
    #[cfg(target_os = "linux")]
    {
        let inodes: Vec<u64> = ours.iter().filter_map(inode).collect();
        if inodes.len() != ours.len() {
            return None;
        }
        ["/proc/net/udp", "/proc/net/udp6"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .flat_map(|table| {
                table
                    .lines()
                    .skip(1)
                    .filter_map(parse_row)
                    .collect::<Vec<_>>()
            })
            .find(|&(addr, ino)| {
                addr.port() == at.port() && overlaps(addr.ip(), at.ip()) && !inodes.contains(&ino)
            })
            .map(|(addr, _)| addr)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (at, ours);
        None
    }
}

/// The inode of a socket, as the kernel's table lists it.
#[cfg(target_os = "linux")]
fn inode(s: &UdpSocket) -> Option<u64> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd()))
        .ok()
        .map(|m| m.ino())
}

/// One row of `/proc/net/udp{,6}`: the local address and the inode.
fn parse_row(line: &str) -> Option<(SocketAddr, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (ip, port) = fields.get(1)?.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let inode: u64 = fields.get(9)?.parse().ok()?;
    // The kernel prints each 32-bit word of the address as a number in
    // host byte order: its bytes in memory are the address's.
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(8 * i..8 * i + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[4 * i..4 * i + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some((SocketAddr::new(ip, port), inode))
}

/// Whether datagrams to `b` could reach a socket bound to `a`: the same
/// address, or either one the wildcard (an IPv6 wildcard socket also
/// takes IPv4).
fn overlaps(a: IpAddr, b: IpAddr) -> bool {
    let v4 = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    };
    let (a, b) = (v4(a), v4(b));
    a == b || a.is_unspecified() || b.is_unspecified()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;

    #[test]
    fn rows_of_the_kernel_table_parse() {
        let v4 = "  12: 0100007F:1E61 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 424242 2 0000000000000000 0";
        let (addr, ino) = parse_row(v4).unwrap();
        assert_eq!(addr, "127.0.0.1:7777".parse().unwrap());
        assert_eq!(ino, 424_242);
        let v6 = "   3: 00000000000000000000000001000000:1E61 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 99 2 0000000000000000 0";
        assert_eq!(parse_row(v6).unwrap().0, "[::1]:7777".parse().unwrap());
        assert!(parse_row("  sl  local_address rem_address").is_none());
    }

    #[test]
    fn wildcards_overlap_every_address_and_others_only_themselves() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(overlaps(ip("0.0.0.0"), ip("127.0.0.1")));
        assert!(overlaps(ip("::"), ip("127.0.0.1")));
        assert!(overlaps(ip("127.0.0.1"), ip("::ffff:127.0.0.1")));
        assert!(!overlaps(ip("127.0.0.1"), ip("127.0.0.2")));
    }

    /// The check after binding: a `SO_REUSEPORT` socket that is not one
    /// of ours on the port (one that joined between the probe and our
    /// binds) is found; our own are not.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_socket_that_joined_the_group_is_found_and_ours_are_not() {
        use socket2::{Domain, Protocol, Socket, Type};
        let reuse = |at: SocketAddr| -> UdpSocket {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
            s.set_reuse_port(true).unwrap();
            s.bind(&at.into()).unwrap();
            s.into()
        };
        let other = reuse("127.0.0.1:0".parse().unwrap());
        let at = other.local_addr().unwrap();
        let ours = vec![reuse(at), reuse(at)];
        assert_eq!(sharer(at, &ours), Some(at));
        drop(other);
        assert_eq!(sharer(at, &ours), None);
    }

    /// A port another process's `SO_REUSEPORT` socket holds (here: one of
    /// this process not made by this call, which the kernel treats alike):
    /// refused, with the address named; this call's own sockets share it.
    #[test]
    fn a_port_another_reuseport_socket_holds_is_refused() {
        let own = bind_reuseport("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let at = own[0].local_addr().unwrap();
        assert_eq!(own[1].local_addr().unwrap(), at, "the loops share it");
        let e = bind_reuseport(at, 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&at.to_string()), "{e}");
    }
}
