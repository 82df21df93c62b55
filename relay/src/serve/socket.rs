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

/// A non-blocking socket with its receive buffers.
pub(crate) struct BatchSocket {
    socket: MioSocket,
    state: UdpSocketState,
    /// `BATCH_SIZE` slots of `SLOT` bytes, allocated once.
    bufs: Vec<u8>,
    meta: [RecvMeta; BATCH_SIZE],
}

impl BatchSocket {
    /// Takes `socket` over (it becomes non-blocking).
    pub(crate) fn new(socket: UdpSocket) -> io::Result<Self> {
        let state = UdpSocketState::new((&socket).into())?;
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
            match self.state.recv((&self.socket).into(), &mut iovs, &mut self.meta) {
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
