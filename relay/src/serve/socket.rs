//! One event loop's UDP socket: batched receive through `quinn-udp`
//! (`recvmmsg`, and GRO where the kernel has it) into buffers owned by the
//! socket and reused for every batch, so receiving allocates nothing.

use lockstep::peer::udp::is_transient;
use mio::net::UdpSocket as MioSocket;
use quinn_udp::{BATCH_SIZE, RecvMeta, Transmit, UdpSocketState};
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};

/// Bytes per receive slot: with GRO the kernel may coalesce many datagrams
/// from one sender into one slot (the largest UDP payload fits).
const SLOT: usize = 64 * 1024;

/// Most datagrams handed to the kernel in one `sendmmsg`.
const SEND_BATCH: usize = 64;

/// Socket buffer size asked of the kernel, each way. Thousands of peers
/// send at each turn's boundary together: the usual default (208 KiB,
/// about 250 small datagrams counting the kernel's per-datagram overhead)
/// overflows and the kernel drops the rest, which costs the peers a resend
/// each. The kernel caps it at `net.core.rmem_max` / `wmem_max`.
pub(crate) const SOCKET_BUFFER: usize = 4 << 20;

/// Datagrams waiting to be sent: one buffer for all of them, reused.
#[derive(Debug, Default)]
pub(crate) struct Outgoing {
    bytes: Vec<u8>,
    items: Vec<(SocketAddr, usize)>,
}

impl Outgoing {
    /// Queues one datagram.
    pub(crate) fn push(&mut self, to: SocketAddr, d: &[u8]) {
        self.bytes.extend_from_slice(d);
        self.items.push((to, d.len()));
    }

    /// Datagrams queued.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.items.clear();
    }
}

/// A non-blocking socket with its receive buffers.
pub(crate) struct BatchSocket {
    socket: MioSocket,
    state: UdpSocketState,
    /// `BATCH_SIZE` slots of `SLOT` bytes, allocated once.
    bufs: Vec<u8>,
    meta: [RecvMeta; BATCH_SIZE],
}

/// The `sendmmsg` headers, reused for every batch. Made on the thread that
/// sends (they hold raw pointers, so they cannot move between threads).
pub(crate) struct SendHeaders {
    #[cfg(target_os = "linux")]
    headers: nix::sys::socket::MultiHeaders<nix::sys::socket::SockaddrStorage>,
    #[cfg(target_os = "linux")]
    addrs: Vec<Option<nix::sys::socket::SockaddrStorage>>,
}

impl SendHeaders {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(target_os = "linux")]
            headers: nix::sys::socket::MultiHeaders::preallocate(SEND_BATCH, None),
            #[cfg(target_os = "linux")]
            addrs: Vec::with_capacity(SEND_BATCH),
        }
    }
}

impl BatchSocket {
    /// Takes `socket` over (it becomes non-blocking).
    pub(crate) fn new(socket: UdpSocket) -> io::Result<Self> {
        let state = UdpSocketState::new((&socket).into())?;
        // Best effort: a smaller buffer than asked still works, it only
        // drops sooner under bursts (the transport resends).
        let sock = socket2::SockRef::from(&socket);
        let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
        Ok(Self {
            socket: MioSocket::from_std(socket),
            state,
            bufs: vec![0; SLOT * BATCH_SIZE],
            meta: [RecvMeta::default(); BATCH_SIZE],
        })
    }

    /// The socket, to register with the loop's poller.
    pub(crate) const fn source(&mut self) -> &mut MioSocket {
        &mut self.socket
    }

    /// Receives one batch (one `recvmmsg`) and passes every datagram in it
    /// to `each`; returns how many datagrams came in. 0 means there was
    /// nothing to read; fewer than [`BATCH_SIZE`] slots filled means the
    /// socket is drained for now.
    pub(crate) fn recv_batch(
        &mut self,
        mut each: impl FnMut(SocketAddr, &[u8]),
    ) -> io::Result<(usize, bool)> {
        let n = {
            let mut chunks = self.bufs.chunks_mut(SLOT).map(IoSliceMut::new);
            let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] =
                std::array::from_fn(|_| chunks.next().unwrap_or_else(|| IoSliceMut::new(&mut [])));
            match self
                .state
                .recv((&self.socket).into(), &mut iovs, &mut self.meta)
            {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((0, true)),
                Err(e) if is_transient(&e) => return Ok((0, false)),
                Err(e) => return Err(e),
            }
        };
        let mut datagrams = 0;
        for (meta, slot) in self.meta[..n].iter().zip(self.bufs.chunks(SLOT)) {
            let stride = meta.stride.max(1);
            for d in slot[..meta.len.min(SLOT)].chunks(stride) {
                each(meta.addr, d);
                datagrams += 1;
            }
        }
        Ok((datagrams, n < BATCH_SIZE))
    }

    /// Sends every queued datagram and empties `out`; returns how many
    /// datagrams and bytes went out. On Linux, `SEND_BATCH` datagrams per
    /// `sendmmsg`; elsewhere one `sendmsg` each. A datagram the kernel
    /// refuses (full send buffer, unreachable destination) is dropped: the
    /// transport resends what matters.
    pub(crate) fn send_all(&self, h: &mut SendHeaders, out: &mut Outgoing) -> (u64, u64) {
        let mut sent = (0, 0);
        let mut at = 0;
        let mut i = 0;
        while i < out.items.len() {
            let n = self.send_some(h, &out.bytes[at..], &out.items[i..]);
            let n = if n == 0 {
                // The first one was refused: drop it and go on.
                let (to, len) = out.items[i];
                if self.send(to, &out.bytes[at..at + len]) {
                    sent.0 += 1;
                    sent.1 += len as u64;
                }
                1
            } else {
                for &(_, len) in &out.items[i..i + n] {
                    sent.0 += 1;
                    sent.1 += len as u64;
                }
                n
            };
            at += out.items[i..i + n].iter().map(|&(_, l)| l).sum::<usize>();
            i += n;
        }
        out.clear();
        sent
    }

    /// One `sendmmsg` of up to `SEND_BATCH` of `items` (whose bytes start
    /// `bytes`); how many the kernel took (0 on an error).
    #[cfg(target_os = "linux")]
    fn send_some(&self, h: &mut SendHeaders, bytes: &[u8], items: &[(SocketAddr, usize)]) -> usize {
        use nix::sys::socket::{MsgFlags, SockaddrStorage, sendmmsg};
        use std::os::fd::AsRawFd;
        let items = &items[..items.len().min(SEND_BATCH)];
        let mut slices: [[io::IoSlice<'_>; 1]; SEND_BATCH] =
            std::array::from_fn(|_| [io::IoSlice::new(&[])]);
        let mut at = 0;
        h.addrs.clear();
        for (k, &(to, len)) in items.iter().enumerate() {
            slices[k] = [io::IoSlice::new(bytes.get(at..at + len).unwrap_or(&[]))];
            h.addrs.push(Some(SockaddrStorage::from(to)));
            at += len;
        }
        match sendmmsg(
            self.socket.as_raw_fd(),
            &mut h.headers,
            &slices[..items.len()],
            &h.addrs,
            [],
            MsgFlags::empty(),
        ) {
            Ok(results) => results.count(),
            Err(_) => 0,
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn send_some(&self, _: &mut SendHeaders, _: &[u8], _: &[(SocketAddr, usize)]) -> usize {
        0
    }

    /// Sends one datagram. A full send buffer drops it (the transport
    /// resends what matters); so does an error for one destination.
    pub(crate) fn send(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        let t = Transmit {
            destination: to,
            ecn: None,
            contents: bytes,
            segment_size: None,
            src_ip: None,
        };
        self.state.try_send((&self.socket).into(), &t).is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_socket_buffers_are_raised_as_far_as_the_kernel_allows() {
        let max = |name: &str| -> usize {
            std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        let socket = UdpSocket::bind(("127.0.0.1", 0)).unwrap();
        let before = socket2::SockRef::from(&socket).recv_buffer_size().unwrap();
        let b = BatchSocket::new(socket).unwrap();
        let sock = socket2::SockRef::from(&b.socket);
        // Linux reports twice what it grants (its bookkeeping overhead).
        let want = |cap: usize| SOCKET_BUFFER.min(cap) * 2;
        let (rmem, wmem) = (max("rmem_max"), max("wmem_max"));
        assert!(sock.recv_buffer_size().unwrap() >= want(rmem).max(before));
        assert!(sock.send_buffer_size().unwrap() >= want(wmem));
    }
}
