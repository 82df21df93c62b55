//! The floor the relay's CPU is measured against: an echo server doing the
//! serve loop's socket I/O (its wake-up pacing, one epoll wait per wake-up,
//! `recvmmsg` batches into reused buffers, `sendmmsg` batches out) and
//! nothing else. Used by the relay capacity benchmark; not part of serving
//! matches.

use super::event_loop::pace;
use super::socket::{BatchSocket, Outgoing, SendHeaders};
use lockstep::{Duration, Instant};
use mio::{Events, Interest, Poll, Token};
use std::io;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};

/// What an echo run moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EchoCounts {
    /// Datagrams received.
    pub packets_in: u64,
    /// Datagrams sent back.
    pub packets_out: u64,
}

/// Echoes every datagram back to its sender, one thread per socket (as
/// `serve_loops` runs one loop per socket), until `stop` is set.
///
/// # Errors
/// A socket or poller error.
pub fn serve_echo(sockets: Vec<UdpSocket>, stop: &AtomicBool) -> io::Result<EchoCounts> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = sockets
            .into_iter()
            .map(|s| scope.spawn(move || echo_loop(s, stop)))
            .collect();
        handles
            .into_iter()
            .try_fold(EchoCounts::default(), |acc, h| {
                let c = h
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("an echo loop panicked")))?;
                Ok(EchoCounts {
                    packets_in: acc.packets_in + c.packets_in,
                    packets_out: acc.packets_out + c.packets_out,
                })
            })
    })
}

fn echo_loop(socket: UdpSocket, stop: &AtomicBool) -> io::Result<EchoCounts> {
    let mut socket = BatchSocket::new(socket)?;
    let mut poll = Poll::new()?;
    poll.registry()
        .register(socket.source(), Token(0), Interest::READABLE)?;
    let mut events = Events::with_capacity(8);
    let mut counts = EchoCounts::default();
    // What one wake-up received, sent back after the batch as the relay does.
    let mut out = Outgoing::default();
    let mut headers = SendHeaders::new();
    // The relay loop's wake-up pacing, so the floor moves datagrams in the
    // same batches the relay does.
    let epoch = std::time::Instant::now();
    let clock = || Instant::from_std(epoch, std::time::Instant::now());
    let mut last_wake = Instant::ZERO;
    while !stop.load(Ordering::Relaxed) {
        let wait = pace(clock(), last_wake, Duration::from_millis(20));
        let r = poll.poll(&mut events, Some(wait.to_std()));
        last_wake = clock();
        match r {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        loop {
            let (_, drained) = socket.recv_batch(|from, d| out.push(from, d))?;
            if drained {
                break;
            }
        }
        counts.packets_in += out.len() as u64;
        counts.packets_out += socket.send_all(&mut headers, &mut out).0;
    }
    Ok(counts)
}
