//! A thin UDP driver: one thread owns a `std::net::UdpSocket` and the real
//! clock and feeds a sans-IO [`Client`] or [`Server`]. The game thread talks
//! to it through bounded crossbeam channels: commands in, events out.
//!
//! ```no_run
//! use lockstep::driver::{ClientCommand, Driver, DriverConfig, DriverEvent};
//! use lockstep::transport::{Channel, Client, ClientEvent, TransportConfig};
//! use lockstep::Instant;
//! # fn main() -> std::io::Result<()> {
//! let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
//! let server = "127.0.0.1:4000".parse().unwrap();
//! let client = Client::new(Instant::ZERO, server, TransportConfig::default(), 1);
//! let driver = Driver::spawn(socket, client, DriverConfig::default())?;
//! driver.commands().send(ClientCommand::Send(Channel::Reliable, b"hi".to_vec())).ok();
//! while let Ok(ev) = driver.events().recv() {
//!     if let DriverEvent::Event(ClientEvent::Disconnected(_)) = ev { break; }
//! }
//! driver.stop()?;
//! # Ok(()) }
//! ```

use crate::time::{Duration, Instant};
use crate::transport::{
    Channel, Client, ClientEvent, ConnId, LinkStats, SendError, Server, ServerEvent,
};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use std::collections::VecDeque;
use std::io::{self, ErrorKind};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// A sans-IO endpoint the driver can run.
pub trait Endpoint: Send + 'static {
    /// Events it produces.
    type Event: Send + 'static;
    /// Commands the game thread sends it.
    type Command: Send + 'static;
    /// Periodic link statistics.
    type Stats: Send + 'static;
    /// Feeds one datagram.
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]);
    /// Advances timers.
    fn handle_timeout(&mut self, now: Instant);
    /// Next datagram to send.
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr>;
    /// Next timer deadline.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Next event.
    fn poll_event(&mut self) -> Option<Self::Event>;
    /// Applies a command; a refused send comes back as an error.
    fn apply(&mut self, now: Instant, cmd: Self::Command) -> Result<(), SendError>;
    /// Current statistics.
    fn stats(&self) -> Self::Stats;
}

/// What the game thread asks a client driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCommand {
    /// Send a message.
    Send(Channel, Vec<u8>),
    /// Close cleanly.
    Disconnect,
}

/// What the game thread asks a server driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerCommand {
    /// Send a message to one connection.
    Send(ConnId, Channel, Vec<u8>),
    /// Close one connection cleanly.
    Disconnect(ConnId),
}

impl Endpoint for Client {
    type Event = ClientEvent;
    type Command = ClientCommand;
    type Stats = LinkStats;
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        Self::handle_datagram(self, now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Self::handle_timeout(self, now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        Self::poll_transmit(self, now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Self::poll_timeout(self)
    }
    fn poll_event(&mut self) -> Option<ClientEvent> {
        Self::poll_event(self)
    }
    fn apply(&mut self, now: Instant, cmd: ClientCommand) -> Result<(), SendError> {
        match cmd {
            ClientCommand::Send(ch, msg) => self.send(ch, &msg),
            ClientCommand::Disconnect => {
                self.disconnect(now);
                Ok(())
            }
        }
    }
    fn stats(&self) -> LinkStats {
        Self::stats(self)
    }
}

impl Endpoint for Server {
    type Event = ServerEvent;
    type Command = ServerCommand;
    type Stats = Vec<(ConnId, LinkStats)>;
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        Self::handle_datagram(self, now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Self::handle_timeout(self, now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        Self::poll_transmit(self, now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Self::poll_timeout(self)
    }
    fn poll_event(&mut self) -> Option<ServerEvent> {
        Self::poll_event(self)
    }
    fn apply(&mut self, now: Instant, cmd: ServerCommand) -> Result<(), SendError> {
        match cmd {
            ServerCommand::Send(c, ch, msg) => self.send(c, ch, &msg),
            ServerCommand::Disconnect(c) => {
                self.disconnect(c, now);
                Ok(())
            }
        }
    }
    fn stats(&self) -> Vec<(ConnId, LinkStats)> {
        self.connections()
            .filter_map(|c| Self::stats(self, c).map(|s| (c, s)))
            .collect()
    }
}

/// What the driver hands to the game thread.
#[derive(Clone, Debug)]
pub enum DriverEvent<E, S> {
    /// An endpoint event.
    Event(E),
    /// A command's send was refused.
    SendFailed(SendError),
    /// Periodic link statistics.
    Stats(S),
}

/// Driver tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// Capacity of the event and command channels.
    pub queue: usize,
    /// How often a `Stats` event is emitted (`None`: never).
    pub stats_interval: Option<Duration>,
    /// Longest the thread blocks on the socket before checking commands.
    pub max_wait: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            queue: 1024,
            stats_interval: Some(Duration::from_secs(1)),
            max_wait: Duration::from_millis(2),
        }
    }
}

type Events<E> = DriverEvent<<E as Endpoint>::Event, <E as Endpoint>::Stats>;

/// A running driver thread.
pub struct Driver<E: Endpoint> {
    events: Receiver<Events<E>>,
    commands: Sender<E::Command>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
    local_addr: SocketAddr,
}

impl<E: Endpoint> Driver<E> {
    /// Starts a thread that owns `socket` and runs `endpoint`.
    pub fn spawn(socket: UdpSocket, endpoint: E, cfg: DriverConfig) -> io::Result<Self> {
        let local_addr = socket.local_addr()?;
        let (ev_tx, ev_rx) = bounded(cfg.queue.max(1));
        let (cmd_tx, cmd_rx) = bounded(cfg.queue.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lockstep-udp".into())
            .spawn(move || run(socket, endpoint, cfg, &ev_tx, &cmd_rx, &flag))?;
        Ok(Self {
            events: ev_rx,
            commands: cmd_tx,
            stop,
            thread: Some(thread),
            local_addr,
        })
    }

    /// Events from the endpoint (bounded; the driver holds back when it is full).
    #[must_use]
    pub fn events(&self) -> &Receiver<Events<E>> {
        &self.events
    }

    /// Commands to the endpoint (bounded).
    #[must_use]
    pub fn commands(&self) -> &Sender<E::Command> {
        &self.commands
    }

    /// The socket's local address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops the thread and returns its I/O result.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("driver thread panicked"))),
            None => Ok(()),
        }
    }
}

impl<E: Endpoint> Drop for Driver<E> {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn run<E: Endpoint>(
    socket: UdpSocket,
    mut ep: E,
    cfg: DriverConfig,
    events: &Sender<Events<E>>,
    commands: &Receiver<E::Command>,
    stop: &AtomicBool,
) -> io::Result<()> {
    let epoch = std::time::Instant::now();
    let clock = || Instant::from_std(epoch, std::time::Instant::now());
    let mut buf = Vec::with_capacity(crate::wire::MAX_PACKET);
    let mut rx = vec![0u8; 2048];
    let mut stash: VecDeque<Events<E>> = VecDeque::new();
    let mut next_stats = cfg.stats_interval.map(|i| clock() + i);
    while !stop.load(Ordering::Relaxed) {
        let now = clock();
        while let Ok(cmd) = commands.try_recv() {
            if let Err(e) = ep.apply(now, cmd) {
                stash.push_back(DriverEvent::SendFailed(e));
            }
        }
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        while let Some(to) = ep.poll_transmit(now, &mut buf) {
            match socket.send_to(&buf, to) {
                Ok(_) => {}
                // A full socket buffer is loss the transport already handles.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock
                            | ErrorKind::Interrupted
                            | ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        if let (Some(t), Some(i)) = (next_stats, cfg.stats_interval) {
            if now >= t {
                // Stats are periodic and superseded by the next ones: drop them when
                // the game thread is behind instead of queueing them.
                if stash.is_empty() {
                    let _ = events.try_send(DriverEvent::Stats(ep.stats()));
                }
                next_stats = Some(now + i);
            }
        }
        // Hand events over without ever blocking the network thread: what does not
        // fit waits here, and the endpoint keeps its own until then.
        loop {
            let ev = match stash.pop_front() {
                Some(ev) => ev,
                None => match ep.poll_event() {
                    Some(e) => DriverEvent::Event(e),
                    None => break,
                },
            };
            match events.try_send(ev) {
                Ok(()) => {}
                Err(TrySendError::Full(ev)) => {
                    stash.push_front(ev);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => return Ok(()),
            }
        }
        let mut wait = cfg.max_wait;
        if let Some(t) = ep.poll_timeout() {
            wait = wait.min(t.saturating_since(now));
        }
        let wait = wait.max(Duration::from_micros(100));
        socket.set_read_timeout(Some(wait.to_std()))?;
        match socket.recv_from(&mut rx) {
            Ok((n, from)) => {
                let now = clock();
                ep.handle_datagram(now, from, &rx[..n]);
                // Drain whatever else already arrived without waiting.
                socket.set_nonblocking(true)?;
                while let Ok((n, from)) = socket.recv_from(&mut rx) {
                    ep.handle_datagram(now, from, &rx[..n]);
                }
                socket.set_nonblocking(false)?;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock
                        | ErrorKind::TimedOut
                        | ErrorKind::Interrupted
                        | ErrorKind::ConnectionReset
                        | ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::TransportConfig;

    #[test]
    fn loopback_echo_over_real_sockets() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        let ssock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let server = Server::new(TransportConfig::default(), [3; 32]);
        let sd = Driver::spawn(ssock, server, DriverConfig::default()).unwrap();
        let csock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let client = Client::new(
            Instant::ZERO,
            sd.local_addr(),
            TransportConfig::default(),
            9,
        );
        let cd = Driver::spawn(csock, client, DriverConfig::default()).unwrap();
        for i in 0..50u32 {
            cd.commands()
                .send(ClientCommand::Send(
                    Channel::Reliable,
                    i.to_le_bytes().to_vec(),
                ))
                .unwrap();
        }
        // Server side: echo every message back.
        let mut echoed = 0;
        let mut conn = None;
        while echoed < 50 {
            match sd
                .events()
                .recv_timeout(left())
                .expect("server event in time")
            {
                DriverEvent::Event(ServerEvent::Connected { conn: c, addr }) => {
                    assert_eq!(addr, cd.local_addr());
                    conn = Some(c);
                }
                DriverEvent::Event(ServerEvent::Message { conn: c, bytes }) => {
                    sd.commands()
                        .send(ServerCommand::Send(c, Channel::Reliable, bytes))
                        .unwrap();
                    echoed += 1;
                }
                _ => {}
            }
        }
        let mut got = Vec::new();
        let mut connected = false;
        while got.len() < 50 {
            match cd
                .events()
                .recv_timeout(left())
                .expect("client event in time")
            {
                DriverEvent::Event(ClientEvent::Connected) => connected = true,
                DriverEvent::Event(ClientEvent::Message(m)) => got.push(m),
                DriverEvent::Event(ClientEvent::Disconnected(r)) => panic!("{r}"),
                _ => {}
            }
        }
        assert!(connected);
        let want: Vec<Vec<u8>> = (0..50u32).map(|i| i.to_le_bytes().to_vec()).collect();
        assert_eq!(got, want);
        cd.commands().send(ClientCommand::Disconnect).unwrap();
        loop {
            let ev = sd
                .events()
                .recv_timeout(left())
                .expect("disconnect in time");
            if let DriverEvent::Event(ServerEvent::Disconnected { conn: c, .. }) = ev {
                assert_eq!(Some(c), conn);
                break;
            }
        }
        cd.stop().unwrap();
        sd.stop().unwrap();
    }
}

#[cfg(test)]
mod proxy_tests {
    use super::*;
    use crate::netsim::LinkConfig;
    use crate::netsim::proxy::{Proxy, ProxyConfig};
    use crate::transport::TransportConfig;

    #[test]
    fn two_clients_share_one_impaired_proxy() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        let ssock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sd = Driver::spawn(
            ssock,
            Server::new(TransportConfig::default(), [5; 32]),
            DriverConfig::default(),
        )
        .unwrap();
        let link = LinkConfig {
            latency: Duration::from_millis(5),
            jitter: Duration::from_millis(2),
            loss: 0.1,
            duplicate: 0.05,
            reorder: 0.05,
            ..LinkConfig::default()
        };
        let cfg = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), sd.local_addr(), link, 1);
        let proxy = Proxy::bind(cfg).unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let pt = std::thread::spawn(move || proxy.run(&flag));
        let clients: Vec<_> = (0..2)
            .map(|i| {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                let c = Client::new(Instant::ZERO, proxy_addr, TransportConfig::default(), i);
                let d = Driver::spawn(s, c, DriverConfig::default()).unwrap();
                for k in 0..20u8 {
                    d.commands()
                        .send(ClientCommand::Send(Channel::Reliable, vec![i as u8, k]))
                        .unwrap();
                }
                d
            })
            .collect();
        let mut per_conn: std::collections::BTreeMap<ConnId, Vec<Vec<u8>>> = Default::default();
        while per_conn.values().map(Vec::len).sum::<usize>() < 40 {
            if let DriverEvent::Event(ServerEvent::Message { conn, bytes }) =
                sd.events().recv_timeout(left()).expect("message in time")
            {
                per_conn.entry(conn).or_default().push(bytes);
            }
        }
        assert_eq!(per_conn.len(), 2, "the proxy kept the two clients apart");
        for msgs in per_conn.values() {
            let who = msgs[0][0];
            let want: Vec<Vec<u8>> = (0..20u8).map(|k| vec![who, k]).collect();
            assert_eq!(*msgs, want);
        }
        for d in clients {
            d.stop().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let report = pt.join().unwrap().unwrap();
        assert_eq!(report.clients, 2);
        assert!(report.upstream.delivered > 0 && report.downstream.delivered > 0);
        sd.stop().unwrap();
    }
}
