//! User-space delay proxies between one peer and the relay: one-way delay
//! with uniform jitter, the same for both carriers. The UDP proxy delays each
//! datagram independently (so jitter may reorder them, as on a real path);
//! the TCP proxy delays byte chunks but keeps them in order (a byte stream
//! cannot reorder). Loss is not added here when the kernel drops packets
//! (network namespace + iptables); the UDP proxy can drop datagrams itself
//! as the fallback when that is unavailable.

use crossbeam_channel::{RecvTimeoutError, unbounded};
use lockstep::low_level::Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(50);

/// One-way delay of each direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Delay {
    /// Mean one-way delay.
    pub base: Duration,
    /// The delay varies uniformly within ± this.
    pub jitter: Duration,
}

impl Delay {
    /// Draws one delay.
    fn sample(&self, rng: &mut Rng) -> Duration {
        let j = self.jitter.as_secs_f64();
        let offset = (rng.next_f64() * 2.0 - 1.0) * j;
        Duration::from_secs_f64((self.base.as_secs_f64() + offset).max(0.0))
    }
}

/// A datagram waiting for its delivery time (ties broken by arrival order).
type Queued = (Instant, u64, Dir, Vec<u8>);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Dir {
    Up,
    Down,
}

/// Forwards datagrams between the peer talking to `front` and `upstream`,
/// delaying each by `delay` and dropping each with probability `loss`.
pub fn udp_proxy(
    front: UdpSocket,
    upstream: SocketAddr,
    delay: Delay,
    loss: f64,
    seed: u64,
    stop: &Arc<AtomicBool>,
) -> io::Result<Vec<JoinHandle<()>>> {
    let back = UdpSocket::bind(("127.0.0.1", 0))?;
    back.connect(upstream)?;
    let (tx, rx) = unbounded::<(Dir, SocketAddr, Vec<u8>)>();
    let mut threads = Vec::new();
    for (dir, socket) in [(Dir::Up, &front), (Dir::Down, &back)] {
        let socket = socket.try_clone()?;
        socket.set_read_timeout(Some(POLL))?;
        let (tx, stop) = (tx.clone(), Arc::clone(stop));
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                match socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        if tx.send((dir, from, buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::ConnectionRefused
                        ) => {}
                    Err(_) => return,
                }
            }
        }));
    }
    drop(tx);
    let stop = Arc::clone(stop);
    threads.push(std::thread::spawn(move || {
        let mut rng = Rng::new(seed);
        let mut heap: BinaryHeap<Reverse<Queued>> = BinaryHeap::new();
        let mut peer: Option<SocketAddr> = None;
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let wait = heap
                .peek()
                .map_or(POLL, |Reverse((at, ..))| at.saturating_duration_since(now))
                .min(POLL);
            match rx.recv_timeout(wait) {
                Ok(first) => {
                    for (dir, from, bytes) in std::iter::once(first).chain(rx.try_iter()) {
                        if dir == Dir::Up {
                            peer = Some(from);
                        }
                        if loss > 0.0 && rng.chance(loss) {
                            continue;
                        }
                        n += 1;
                        let at = Instant::now() + delay.sample(&mut rng);
                        heap.push(Reverse((at, n, dir, bytes)));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let now = Instant::now();
            while heap.peek().is_some_and(|Reverse((at, ..))| *at <= now) {
                let Some(Reverse((_, _, dir, bytes))) = heap.pop() else {
                    break;
                };
                let _ = match (dir, peer) {
                    (Dir::Up, _) => back.send(&bytes),
                    (Dir::Down, Some(p)) => front.send_to(&bytes, p),
                    (Dir::Down, None) => Ok(0),
                };
            }
        }
    }));
    Ok(threads)
}

/// Accepts peers on `listener` and forwards each stream to `upstream`,
/// delaying byte chunks in order.
pub fn tcp_proxy(
    listener: TcpListener,
    upstream: SocketAddr,
    delay: Delay,
    seed: u64,
    stop: &Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let stop = Arc::clone(stop);
    Ok(std::thread::spawn(move || {
        let mut pipes = Vec::new();
        let mut k = 0u64;
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((front, _)) => {
                    let Ok(back) = TcpStream::connect(upstream) else {
                        continue;
                    };
                    k += 1;
                    let ok = front.set_nonblocking(false).is_ok()
                        && front.set_nodelay(true).is_ok()
                        && back.set_nodelay(true).is_ok()
                        && front
                            .set_write_timeout(Some(super::carrier::WRITE_LIMIT))
                            .is_ok()
                        && back
                            .set_write_timeout(Some(super::carrier::WRITE_LIMIT))
                            .is_ok();
                    let (Ok(f2), Ok(b2), true) = (front.try_clone(), back.try_clone(), ok) else {
                        continue;
                    };
                    pipes.extend(pipe(front, b2, delay, seed ^ k, &stop));
                    pipes.extend(pipe(back, f2, delay, seed ^ k ^ 0xd0e, &stop));
                }
                // Accept is polled so the stop flag is seen.
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        for p in pipes {
            let _ = p.join();
        }
    }))
}

/// Copies `from` to `to`, each chunk delivered `delay` after it was read but
/// never before the chunk ahead of it.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    delay: Delay,
    seed: u64,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    let (tx, rx) = unbounded::<Option<(Instant, Vec<u8>)>>();
    let stop_r = Arc::clone(stop);
    let reader = std::thread::spawn(move || {
        let mut rng = Rng::new(seed);
        let mut last = Instant::now();
        let mut buf = vec![0u8; 64 * 1024];
        let _ = from.set_read_timeout(Some(POLL));
        while !stop_r.load(Ordering::Relaxed) {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let at = (Instant::now() + delay.sample(&mut rng)).max(last);
                    last = at;
                    if tx.send(Some((at, buf[..n].to_vec()))).is_err() {
                        return;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    let stop_w = Arc::clone(stop);
    let writer = std::thread::spawn(move || {
        while !stop_w.load(Ordering::Relaxed) {
            match rx.recv_timeout(POLL) {
                Ok(Some((at, bytes))) => {
                    let now = Instant::now();
                    if at > now {
                        std::thread::sleep(at - now);
                    }
                    if to.write_all(&bytes).is_err() {
                        break;
                    }
                }
                Ok(None) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    vec![reader, writer]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_the_jitter_band() {
        let d = Delay {
            base: Duration::from_millis(30),
            jitter: Duration::from_millis(10),
        };
        let mut rng = Rng::new(1);
        let samples: Vec<Duration> = (0..1000).map(|_| d.sample(&mut rng)).collect();
        assert!(
            samples
                .iter()
                .all(|s| *s >= Duration::from_millis(20) && *s <= Duration::from_millis(40))
        );
        assert!(samples.iter().any(|s| *s < Duration::from_millis(25)));
        assert!(samples.iter().any(|s| *s > Duration::from_millis(35)));
    }

    #[test]
    fn tcp_proxy_keeps_bytes_in_order() {
        let stop = Arc::new(AtomicBool::new(false));
        let server = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let front = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let front_addr = front.local_addr().unwrap();
        let d = Delay {
            base: Duration::from_millis(2),
            jitter: Duration::from_millis(2),
        };
        let proxy = tcp_proxy(front, server.local_addr().unwrap(), d, 3, &stop).unwrap();
        let mut client = TcpStream::connect(front_addr).unwrap();
        let (mut inner, _) = server.accept().unwrap();
        let sent: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        for chunk in sent.chunks(997) {
            client.write_all(chunk).unwrap();
        }
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        inner.read_to_end(&mut got).unwrap();
        assert_eq!(got, sent);
        stop.store(true, Ordering::Relaxed);
        drop(client);
        drop(inner);
        proxy.join().unwrap();
    }
}
