//! One established, authenticated connection, shared by `Client` and
//! `Server`: MAC and replay checks, ack bookkeeping, RTT, loss, congestion
//! mode, token-bucket pacing, the message layer, keep-alives, the silence
//! timeout, back-pressure and the redundant clean disconnect.

use super::acks::{AckEvent, ReceivedPackets, SentPackets};
use super::auth::{PayloadCipher, ReplayWindow, ct_eq, packet_mac};
use super::bulk::{BulkIn, BulkOut};
use super::config::{Channel, TransportConfig};
use super::congestion::Congestion;
use super::messages::{Incoming, Outgoing, SendError, copies_for_loss};
use super::rtt::RttEstimator;
use super::stats::{LinkEstimate, LinkStats, RateMeter};
use crate::time::{Duration, Instant};
use crate::wire::{self, AuthKind, Frame, Header, MAX_PACKET, Packet, TAG_LEN};
use std::collections::VecDeque;
use thiserror::Error;

mod timing;

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DisconnectReason {
    /// Nothing valid heard for `timeout`.
    #[error("timed out")]
    Timeout,
    /// The handshake did not complete within `timeout`.
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// This side called `disconnect`.
    #[error("closed locally")]
    Local,
    /// The peer sent a clean disconnect.
    #[error("closed by peer")]
    Remote,
    /// The server refused the connection.
    #[error("denied by the server: {0}")]
    Denied(wire::DenyReason),
    /// The un-acked window stayed full for `backpressure_timeout`.
    #[error("un-acked window stalled")]
    Backpressure,
    /// A new handshake from the same address replaced this connection.
    #[error("replaced by a new connection from the same address")]
    Replaced,
    /// The peer kept sending but acknowledged none of our data for
    /// `backpressure_timeout` (a broken or hostile client that would
    /// otherwise be sent to for ever).
    #[error("peer acknowledged nothing")]
    NoAcks,
    /// The 64-bit packet counter ran out (never in practice).
    #[error("packet counter exhausted")]
    CounterExhausted,
    /// A packet could not be encrypted (its own header did not decode):
    /// the connection is closed rather than send a payload in the clear.
    /// Never happens unless the packet builder has a bug.
    #[error("a packet could not be encrypted")]
    Internal,
    /// The server said it does not know this connection (it restarted)
    /// while the connection had been silent: connect again.
    #[error("the server no longer knows this connection (it restarted)")]
    Forgotten,
}

/// What a connection reports to its endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConnEvent {
    Message(Vec<u8>),
    Backpressure,
    Closed(DisconnectReason),
}

/// Why an authenticated packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropReason {
    Malformed,
    Auth,
    Replay,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    /// Closing after the reliable messages already queued are delivered
    /// (acked), so a last message such as a refusal reaches the peer before
    /// the disconnect; nothing new is accepted or delivered meanwhile.
    Flushing {
        reason: DisconnectReason,
        /// Give up waiting for acks then and close anyway.
        until: Instant,
    },
    Closing {
        copies_left: u8,
        reason: DisconnectReason,
    },
    Closed,
}

/// Which end of the connection this is (picks the send and receive keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Client,
    Server,
}

pub(crate) struct Connection {
    cfg: TransportConfig,
    send_key: [u8; 32],
    recv_key: [u8; 32],
    /// Token mode: payloads are encrypted under keys derived from the
    /// secret ones, then MACed as in open mode. Open mode: `None`, MAC only.
    send_cipher: Option<PayloadCipher>,
    recv_cipher: Option<PayloadCipher>,
    /// Where a received encrypted packet is decrypted (kept to reuse its
    /// allocation).
    plain: Vec<u8>,
    send_counter: u64,
    replay: ReplayWindow,
    received: ReceivedPackets,
    sent: SentPackets,
    rtt: RttEstimator,
    congestion: Congestion,
    out: Outgoing,
    inc: Incoming,
    credit: u64,
    bulk_out: BulkOut,
    bulk_in: BulkIn,
    /// Token bucket of the bulk path (µs of its packet interval).
    bulk_credit: u64,
    bulk_serials: super::acks::BulkSerials,
    now: Instant,
    last_recv: Instant,
    last_send: Instant,
    /// Since when an ack is owed for ack-eliciting packets received, and how many.
    ack_owed: Option<Instant>,
    /// Since when an ack is owed only for packets that brought nothing new
    /// (every frame a duplicate: an early copy or a ride-along of what was
    /// already delivered): it waits for a packet that goes anyway, at most
    /// `lazy_ack_delay`.
    lazy_ack_owed: Option<Instant>,
    /// The longest the other side holds its acks, learned from the ack
    /// delays in its headers (a max that decays by 1/16 per smaller
    /// sample): the bulk resend backstop waits for it.
    peer_ack_delay: Duration,
    /// The newest packet received, if it brought duplicates only (its ack
    /// is held lazily, so our headers do not report its hold).
    lazy_seq: Option<u16>,
    /// When we last sent an ack-eliciting packet (data of our own).
    last_eliciting_send: Option<Instant>,
    eliciting_unacked: u32,
    accepted_to_send: bool,
    state: State,
    events: VecDeque<ConnEvent>,
    full_since: Option<Instant>,
    /// Since when data we sent has waited for an ack with none arriving
    /// (restarted by every ack of a newer packet; `None`: nothing awaits).
    ack_wait_since: Option<Instant>,
    backpressure_armed: bool,
    ack_events: Vec<AckEvent>,
    ids: super::acks::MessageIds,
    sent_bytes: RateMeter,
    recv_bytes: RateMeter,
    acked_bytes: RateMeter,
    sent_packets: RateMeter,
    recv_packets: RateMeter,
    packets_sent: u64,
    packets_received: u64,
    bytes_sent: u64,
    bytes_received: u64,
    dropped_auth: u64,
    dropped_replay: u64,
    dropped_malformed: u64,
    /// Tests only: play a peer that never acknowledges anything.
    #[cfg(test)]
    pub(crate) never_ack: bool,
    /// The drop totals already handed to the server by `take_drops`.
    reported: Drops,
}

/// Per-connection refusals and expiries a server adds to its counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Drops {
    /// Bulk messages refused (none asked for, or the cap was lowered mid-message).
    pub(crate) bulk_refused: u64,
    /// Bulk messages thrown away after a stall.
    pub(crate) bulk_expired: u64,
    /// Reliable frames refused by the reorder cap.
    pub(crate) reorder_refused: u64,
}

impl Connection {
    pub(crate) fn new(
        cfg: TransportConfig,
        role: Role,
        keys: super::auth::ConnKeys,
        encrypted: bool,
        now: Instant,
    ) -> Self {
        let (send_key, recv_key) = match role {
            Role::Client => (keys.c2s, keys.s2c),
            Role::Server => (keys.s2c, keys.c2s),
        };
        let cipher = |key: &[u8; 32]| encrypted.then(|| PayloadCipher::new(key));
        let congestion = Congestion::new(cfg.congestion, now);
        let credit = congestion.interval().as_micros() * u64::from(cfg.burst.max(2));
        Self {
            cfg,
            send_cipher: cipher(&send_key),
            recv_cipher: cipher(&recv_key),
            plain: Vec::new(),
            send_key,
            recv_key,
            send_counter: 0,
            replay: ReplayWindow::default(),
            received: ReceivedPackets::default(),
            sent: SentPackets::default(),
            rtt: RttEstimator::default(),
            congestion,
            out: Outgoing::new(cfg.max_unacked, cfg.max_message),
            inc: Incoming::new(cfg.max_message).with_reorder_cap(cfg.max_reorder_bytes),
            credit,
            bulk_out: BulkOut::new(cfg.max_bulk_message),
            // A server accepts bulk data only where it asked for it
            // (`Server::set_bulk_receive`): closed until then.
            bulk_in: BulkIn::new(match role {
                Role::Client => cfg.max_bulk_message,
                Role::Server => 0,
            }),
            bulk_credit: 0,
            bulk_serials: super::acks::BulkSerials::new(),
            now,
            last_recv: now,
            last_send: now,
            ack_owed: None,
            lazy_ack_owed: None,
            peer_ack_delay: cfg.ack_delay,
            last_eliciting_send: None,
            lazy_seq: None,
            eliciting_unacked: 0,
            accepted_to_send: role == Role::Server,
            state: State::Open,
            events: VecDeque::new(),
            full_since: None,
            ack_wait_since: None,
            backpressure_armed: true,
            ack_events: Vec::new(),
            ids: super::acks::MessageIds::new(),
            sent_bytes: RateMeter::default(),
            recv_bytes: RateMeter::default(),
            acked_bytes: RateMeter::default(),
            sent_packets: RateMeter::default(),
            recv_packets: RateMeter::default(),
            packets_sent: 0,
            packets_received: 0,
            bytes_sent: 0,
            bytes_received: 0,
            dropped_auth: 0,
            dropped_replay: 0,
            dropped_malformed: 0,
            #[cfg(test)]
            never_ack: false,
            reported: Drops::default(),
        }
    }

    /// Sets the largest bulk message accepted from the peer (0: none).
    pub(crate) fn set_bulk_receive(&mut self, max_message: usize) {
        self.bulk_in.set_max_message(max_message);
    }

    /// What this connection refused or threw away since the last call,
    /// for the server's totals ([`super::ServerCounters`]).
    pub(crate) fn take_drops(&mut self) -> Drops {
        let now = self.drops();
        let delta = Drops {
            bulk_refused: now.bulk_refused - self.reported.bulk_refused,
            bulk_expired: now.bulk_expired - self.reported.bulk_expired,
            reorder_refused: now.reorder_refused - self.reported.reorder_refused,
        };
        self.reported = now;
        delta
    }

    fn drops(&self) -> Drops {
        Drops {
            bulk_refused: self.bulk_in.refused,
            bulk_expired: self.bulk_in.expired,
            reorder_refused: self.inc.reorder_refused,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.state == State::Open
    }

    pub(crate) fn poll_event(&mut self) -> Option<ConnEvent> {
        self.events.pop_front()
    }

    /// Queues the `Accepted` packet again (the client retransmitted its response).
    pub(crate) fn resend_accepted(&mut self) {
        self.accepted_to_send = true;
    }

    /// Verifies and processes one authenticated datagram.
    pub(crate) fn handle_datagram(&mut self, now: Instant, bytes: &[u8]) -> Result<(), DropReason> {
        self.advance(now);
        if self.state == State::Closed {
            return Ok(());
        }
        // The header's sequence gives the counter the MAC (and in token
        // mode the keystream) is keyed with; nothing else is read before
        // the MAC checks out.
        let Ok((header, header_len)) = wire::decode_header(bytes) else {
            self.dropped_malformed += 1;
            return Err(DropReason::Malformed);
        };
        let Some(body_end) = bytes
            .len()
            .checked_sub(TAG_LEN)
            .filter(|&end| end >= header_len)
        else {
            self.dropped_malformed += 1;
            return Err(DropReason::Malformed);
        };
        let counter = self.replay.reconstruct(header.seq);
        if self.replay.check(counter).is_err() {
            self.dropped_replay += 1;
            return Err(DropReason::Replay);
        }
        let (signed, tag) = bytes.split_at(body_end);
        if !ct_eq(&packet_mac(&self.recv_key, counter, signed), tag) {
            self.dropped_auth += 1;
            return Err(DropReason::Auth);
        }
        let Some(cipher) = &self.recv_cipher else {
            return self.handle_verified(now, bytes, counter);
        };
        // Token mode: authentic, now decrypt the payload (a copy: `bytes`
        // is the caller's).
        let mut plain = std::mem::take(&mut self.plain);
        plain.clear();
        plain.extend_from_slice(bytes);
        cipher.apply(counter, &mut plain[header_len..body_end]);
        let result = self.handle_verified(now, &plain, counter);
        self.plain = plain;
        result
    }

    /// Processes one datagram whose MAC checked out under `counter`, its
    /// payload in the clear.
    fn handle_verified(
        &mut self,
        now: Instant,
        bytes: &[u8],
        counter: u64,
    ) -> Result<(), DropReason> {
        let Ok(Packet::Authed { header, frames, .. }) = wire::decode(bytes) else {
            self.dropped_malformed += 1;
            return Err(DropReason::Malformed);
        };
        self.replay.commit(counter);
        self.last_recv = now;
        self.packets_received += 1;
        self.bytes_received += bytes.len() as u64;
        self.recv_bytes.add(now, bytes.len() as u64);
        self.recv_packets.add(now, 1);
        // Recorded (so acknowledged) once its frames were taken: a packet
        // whose reliable frame was refused by the reorder cap stays
        // unacknowledged, and the sender resends what it carried.
        let mut refused = false;
        match header.kind {
            AuthKind::Disconnect => {
                self.received.record(header.seq, now);
                self.state = State::Closed;
                self.events
                    .push_back(ConnEvent::Closed(DisconnectReason::Remote));
                return Ok(());
            }
            // The server sends Accepted before it has heard any packet of ours,
            // so its ack fields mean nothing; it still asks for an ack.
            AuthKind::Accepted => {
                // The handshake completes with our answer: no delay.
                self.ack_owed.get_or_insert(now);
                self.eliciting_unacked = 4;
            }
            AuthKind::Data => {
                self.on_ack_fields(&header, now);
                let mut delivered = VecDeque::new();
                // Whether any frame was news (a duplicate reliable frame
                // only bumps `duplicates`; an unreliable copy is refused).
                let dups_before = self.inc.duplicates;
                let mut news = false;
                for f in &frames {
                    match *f {
                        Frame::Reliable { id, fragment, data } => {
                            refused |= !self.inc.on_reliable(id, fragment, data, &mut delivered);
                        }
                        Frame::Unreliable { id, data } => {
                            if let Some(m) = self.inc.on_unreliable(id, data) {
                                delivered.push_back(m);
                                news = true;
                            }
                        }
                        Frame::Ping => news = true,
                        Frame::Bulk {
                            msg,
                            total,
                            index,
                            data,
                        } => {
                            news = true;
                            if let Some(m) = self.bulk_in.on_fragment(now, msg, total, index, data)
                            {
                                delivered.push_back(m);
                            }
                        }
                    }
                }
                let reliable_frames = frames
                    .iter()
                    .filter(|f| matches!(f, Frame::Reliable { .. }))
                    .count() as u64;
                news |= self.inc.duplicates - dups_before < reliable_frames;
                // A packet of duplicates only (an early copy of what already
                // arrived, ride-alongs) needs no prompt ack: nothing waits on
                // it. It is acked by the next packet that goes anyway, within
                // `lazy_ack_delay`, well within the sender's loss bound.
                // Only on a two-way link, where we send data of our own
                // (a pure receiver would hold the ack for nothing).
                let talking = self
                    .last_eliciting_send
                    .is_some_and(|t| now.saturating_since(t) < self.lazy_ack_delay());
                if news || (!frames.is_empty() && !talking) {
                    self.ack_owed.get_or_insert(now);
                    self.eliciting_unacked += 1;
                } else if !frames.is_empty() {
                    self.lazy_ack_owed.get_or_insert(now);
                    self.lazy_seq = Some(header.seq);
                }
                // A flushing connection is on its way out: what the peer
                // still sends is acked but not delivered.
                if self.state == State::Open {
                    self.events
                        .extend(delivered.into_iter().map(ConnEvent::Message));
                }
                self.finish_flush();
            }
        }
        if !refused {
            self.received.record(header.seq, now);
        }
        if let Some(srtt) = self.rtt.srtt() {
            self.congestion.update(now, srtt);
        }
        Ok(())
    }

    fn on_ack_fields(&mut self, h: &Header, now: Instant) {
        if self.sent.is_future(h.ack) {
            return;
        }
        let before = self.sent.bytes_acked;
        let unconfirmed = self.sent.unconfirmed_bytes();
        let samples = self.rtt.samples();
        self.sent.on_ack(
            h.ack,
            h.ack_bits,
            h.ack_delay,
            now,
            &mut self.rtt,
            &mut self.ack_events,
        );
        if self.rtt.samples() > samples && self.sent.is_eliciting(h.ack) {
            // The header acked its newest packet, an ack-eliciting one, for
            // the first time: its ack delay is how long the peer held this
            // ack (QUIC's max_ack_delay, learned instead of announced). An
            // ack-only packet of ours is acked whenever the peer next
            // sends, which is no hold anyone waits for.
            let held = Duration::from_millis(u64::from(h.ack_delay));
            self.learn_peer_ack_delay(held.min(Self::MAX_PEER_ACK_DELAY));
        }
        self.acked_bytes.add(now, self.sent.bytes_acked - before);
        if self.sent.unconfirmed_bytes() < unconfirmed {
            // A newer packet was acked: the peer acks; the wait restarts
            // for whatever it has not acked yet.
            let waiting = self
                .last_eliciting_send
                .is_some_and(|t| self.sent.newest_acked_sent.is_none_or(|a| t > a));
            self.ack_wait_since = waiting.then_some(now);
        }
        for ev in self.ack_events.drain(..) {
            if let AckEvent::Acked { messages, bulk, .. } = ev {
                self.out.on_acked(&messages);
                self.bulk_out.on_acked(&bulk);
            }
        }
        self.detect_bulk_loss(now);
        if self.out.unacked() <= self.out.max_unacked() / 2 {
            self.backpressure_armed = true;
        }
        if !self.out.is_full() {
            self.full_since = None;
        }
        self.refresh_copies();
    }

    /// Copies sized from the measured loss, none while the peer is silent
    /// for longer than the loss bound: its "loss" is then a dead or frozen
    /// peer, and copies would only multiply packets nobody receives.
    fn refresh_copies(&mut self) {
        let silent = self.now.saturating_since(self.last_recv) > self.loss_bound();
        self.out.copies = if self.cfg.redundancy && !silent {
            copies_for_loss(self.sent.loss())
        } else {
            0
        };
    }

    /// When a peer that talks but acks nothing is dropped: `backpressure_timeout`
    /// after our data began waiting, once the peer was heard at least a
    /// loss bound into that wait (an honest peer would have acked by then;
    /// a silent one is left to the silence timeout).
    fn no_ack_deadline(&self) -> Option<Instant> {
        let since = self.ack_wait_since?;
        (self.last_recv >= since + self.loss_bound()).then(|| since + self.cfg.backpressure_timeout)
    }

    /// Whether the peer has left its whole send window unacknowledged:
    /// only acks and keep-alives go out until it acks.
    pub(super) fn unconfirmed_full(&self) -> bool {
        self.sent.unconfirmed_bytes() >= self.send_window()
    }

    /// How many bytes may be sent past the newest acknowledged packet:
    /// `initial_window`, plus two for every byte the peer ever acknowledged
    /// (slow start: a peer that acks everything about triples it per round
    /// trip), at most `max_unconfirmed_bytes`. A peer that acknowledges
    /// nothing never earns more than the initial window, so it cannot
    /// draw a large multiple of what it sends (an amplifier).
    pub(super) fn send_window(&self) -> u64 {
        let cap = self.cfg.max_unconfirmed_bytes as u64;
        let earned = (self.cfg.initial_window as u64)
            .saturating_add(self.sent.bytes_acked.saturating_mul(2));
        earned.min(cap)
    }

    /// How long an ack-eliciting packet may stay unanswered before it counts as lost:
    /// RTO plus the peer's ack hold allowance, at most ~1 s unless the RTT itself is longer.
    /// How long nothing valid has been heard, as of `now`.
    pub(crate) fn silent_for(&self, now: Instant) -> Duration {
        now.saturating_since(self.last_recv)
    }

    pub(crate) fn loss_bound(&self) -> Duration {
        let allowance =
            Duration::from_micros(2 * 1_000_000 / u64::from(self.cfg.congestion.bad_pps.max(1)));
        let cap = Duration::from_secs(1).max(self.rtt.srtt_or(Duration::ZERO).saturating_mul(2));
        (self.rtt.rto() + allowance).min(cap)
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        if let State::Flushing { reason, until } = self.state
            && now >= until
        {
            self.start_closing(reason);
        }
        if !self.is_sending() {
            return;
        }
        if now >= self.last_recv + self.cfg.timeout {
            self.state = State::Closed;
            self.events
                .push_back(ConnEvent::Closed(DisconnectReason::Timeout));
            return;
        }
        self.bulk_in.expire(now, self.cfg.bulk_stall_timeout);
        let bound = self.loss_bound();
        self.sent.detect_lost(now, bound, &mut self.ack_events);
        self.ack_events.clear();
        self.detect_bulk_loss(now);
        self.refresh_copies();
        if let Some(srtt) = self.rtt.srtt() {
            self.congestion.update(now, srtt);
        }
        if self.no_ack_deadline().is_some_and(|d| now >= d) {
            self.close(DisconnectReason::NoAcks);
            return;
        }
        if self.out.is_full() {
            let since = *self.full_since.get_or_insert(now);
            if now.saturating_since(since) >= self.cfg.backpressure_timeout {
                self.close(DisconnectReason::Backpressure);
            }
        } else {
            self.full_since = None;
        }
    }

    pub(crate) fn send(&mut self, channel: Channel, msg: &[u8]) -> Result<(), SendError> {
        if self.state != State::Open {
            return Err(SendError::NotConnected);
        }
        let r = match channel {
            Channel::Reliable => self.out.send_reliable(msg),
            Channel::Urgent => self.out.send_urgent(msg),
            Channel::Unreliable => self.out.send_unreliable(msg),
            // A full bulk queue is not the turn window: no Backpressure event,
            // no backpressure timeout; the caller retries after acks.
            Channel::Bulk => return self.bulk_out.send(msg),
        };
        if let Err(SendError::WindowFull { .. }) = r {
            if self.backpressure_armed {
                self.backpressure_armed = false;
                self.events.push_back(ConnEvent::Backpressure);
            }
            self.full_since.get_or_insert(self.now);
        }
        r
    }

    /// Starts a clean close: the disconnect packet goes out `disconnect_copies` times.
    pub(crate) fn close(&mut self, reason: DisconnectReason) {
        if self.is_sending() {
            self.start_closing(reason);
        }
    }

    /// Closes once every reliable message already queued has been acked (or
    /// at `now + timeout` if the peer never acks), then sends the disconnect
    /// packets; so a last message (a refusal and its reason) is delivered
    /// before the connection ends, as a TCP FIN follows the data.
    pub(crate) fn close_after_flush(&mut self, reason: DisconnectReason, now: Instant) {
        if self.state != State::Open {
            return;
        }
        self.state = State::Flushing {
            reason,
            until: now + self.cfg.timeout,
        };
        self.finish_flush();
    }

    /// Whether data packets still go out (open, or flushing before the close).
    fn is_sending(&self) -> bool {
        matches!(self.state, State::Open | State::Flushing { .. })
    }

    /// Moves a flushing connection on to its disconnect packets once nothing is un-acked.
    fn finish_flush(&mut self) {
        if let State::Flushing { reason, .. } = self.state
            && self.out.unacked() == 0
            && self.bulk_out.is_idle()
        {
            self.start_closing(reason);
        }
    }

    fn start_closing(&mut self, reason: DisconnectReason) {
        if !self.received.any() && !self.accepted_to_send {
            self.state = State::Closed;
            self.events.push_back(ConnEvent::Closed(reason));
            return;
        }
        self.state = State::Closing {
            copies_left: self.cfg.disconnect_copies.max(1),
            reason,
        };
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Closed => None,
            State::Closing { .. } => Some(self.now),
            State::Open | State::Flushing { .. } => {
                if self.accepted_to_send {
                    return Some(self.now);
                }
                let mut t = self.last_recv + self.cfg.timeout;
                if let Some(l) = self.sent.next_loss_deadline(self.loss_bound()) {
                    t = t.min(l);
                }
                if let Some(s) = self.next_send_time() {
                    t = t.min(s);
                }
                if let Some(f) = self.full_since {
                    t = t.min(f + self.cfg.backpressure_timeout);
                }
                if let Some(b) = self.bulk_out.next_timeout(self.bulk_timeout()) {
                    t = t.min(b);
                }
                if let Some(b) = self.bulk_in.deadline(self.cfg.bulk_stall_timeout) {
                    t = t.min(b);
                }
                if let State::Flushing { until, .. } = self.state {
                    t = t.min(until);
                }
                if let Some(d) = self.no_ack_deadline() {
                    t = t.min(d);
                }
                // What `handle_timeout` would change with no packet in
                // between, so a server that wakes only connections whose
                // deadline came (its schedule) misses nothing: the return
                // to Good mode, and the start of the back-pressure clock
                // for a window that filled without a refused send.
                if self.rtt.srtt().is_some()
                    && let Some(c) = self.congestion.next_change()
                {
                    t = t.min(c);
                }
                if self.full_since.is_none() && self.out.is_full() {
                    t = t.min(self.now);
                }
                Some(t)
            }
        }
    }

    fn header(&self, kind: AuthKind, now: Instant) -> Header {
        #[cfg(test)]
        if self.never_ack {
            // The first packet the server sent (its Accepted), every time.
            return Header {
                kind,
                seq: self.send_counter as u16,
                ack: 0,
                ack_bits: 0,
                ack_delay: wire::ACK_DELAY_UNKNOWN,
            };
        }
        let (ack, ack_bits, mut ack_delay) = self.received.ack_fields(now);
        if self.lazy_seq == Some(ack) {
            // Our newest packet was held on purpose (duplicates only): its
            // hold is no ack delay the peer should wait for, nor an RTT.
            ack_delay = wire::ACK_DELAY_UNKNOWN;
        }
        Header {
            kind,
            seq: self.send_counter as u16,
            ack,
            ack_bits,
            ack_delay,
        }
    }

    /// MACs (and in token mode first encrypts) the packet in `buf` and
    /// records it as sent; returns false, with `buf` cleared and the
    /// connection closed, if the packet could not be encrypted.
    #[must_use]
    fn seal(&mut self, now: Instant, buf: &mut Vec<u8>, eliciting: bool) -> bool {
        let counter = self.send_counter;
        if let Some(cipher) = &self.send_cipher
            && encrypt_payload(cipher, counter, buf).is_err()
        {
            // Never send a token-mode payload in the clear: our own header
            // did not decode, so where the payload starts is unknown. No
            // such packet is ever built; if one were, the connection ends.
            buf.clear();
            self.state = State::Closed;
            self.events
                .push_back(ConnEvent::Closed(DisconnectReason::Internal));
            return false;
        }
        let tag = packet_mac(&self.send_key, counter, buf);
        buf.extend_from_slice(&tag);
        self.sent.on_sent(
            counter as u16,
            now,
            buf.len(),
            eliciting,
            std::mem::take(&mut self.ids),
            std::mem::take(&mut self.bulk_serials),
        );
        self.send_counter += 1;
        if eliciting {
            self.last_eliciting_send = Some(now);
            self.ack_wait_since.get_or_insert(now);
        }
        self.credit = self.credit.saturating_sub(self.charge(buf.len()));
        self.last_send = now;
        self.packets_sent += 1;
        self.bytes_sent += buf.len() as u64;
        self.sent_bytes.add(now, buf.len() as u64);
        self.sent_packets.add(now, 1);
        true
    }

    /// Writes the next datagram into `buf`, if one is due.
    pub(crate) fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        self.advance(now);
        buf.clear();
        if self.send_counter == u64::MAX {
            if self.is_sending() {
                self.state = State::Closed;
                self.events
                    .push_back(ConnEvent::Closed(DisconnectReason::CounterExhausted));
            }
            return false;
        }
        match self.state {
            State::Closed => false,
            State::Closing {
                copies_left,
                reason,
            } => {
                let h = self.header(AuthKind::Disconnect, now);
                wire::encode_header(&h, buf);
                if !self.seal(now, buf, false) {
                    return false;
                }
                if copies_left <= 1 {
                    self.state = State::Closed;
                    self.events.push_back(ConnEvent::Closed(reason));
                } else {
                    self.state = State::Closing {
                        copies_left: copies_left - 1,
                        reason,
                    };
                }
                true
            }
            State::Open | State::Flushing { .. } => {
                if self.accepted_to_send {
                    self.accepted_to_send = false;
                    let h = self.header(AuthKind::Accepted, now);
                    wire::encode_header(&h, buf);
                    return self.seal(now, buf, false);
                }
                match self.next_send_time() {
                    Some(t) if t <= now => {}
                    _ => return false,
                }
                let r = self.resend();
                let token = self.congestion.interval().as_micros();
                let credit_before = self.credit;
                let tokened = (self.credit >= token
                    && (self.out.has_fresh() || self.out.next_due(r).is_some_and(|t| t <= now)))
                    || (self.credit >= 2 * token && now >= self.last_send + self.cfg.keepalive);
                let free = !tokened;
                let h = self.header(AuthKind::Data, now);
                wire::encode_header(&h, buf);
                let header_len = buf.len();
                let budget = MAX_PACKET - header_len - TAG_LEN;
                // Bulk fragments get only the room turn traffic left, and only
                // with a bulk token; ride-along copies of turn messages do not
                // take the room of the fragment a packet is sent for.
                let bulk_token = self.congestion.bulk_interval().as_micros();
                // At the unconfirmed-bytes cap no data goes: only the owed
                // ack or a keep-alive ping (which an honest peer acks, with
                // everything before it, should its earlier acks have been lost).
                let capped = self.unconfirmed_full();
                let bulk_now =
                    !capped && self.bulk_credit >= bulk_token && self.bulk_out.wants_packet();
                // Large new turn data does not wait for a turn token (Nagle's
                // rule: a full segment goes now); it spends a bulk token.
                let large_fresh = !capped
                    && free
                    && self.bulk_credit >= bulk_token
                    && self.out.fresh_bytes() >= Self::LARGE_FRESH;
                let keep = if bulk_now {
                    wire::BULK_CHUNK + wire::BULK_FRAME_OVERHEAD
                } else {
                    0
                };
                if !capped {
                    self.out.fill(now, r, budget, keep, buf, &mut self.ids);
                }
                if bulk_now {
                    let left = MAX_PACKET - TAG_LEN - buf.len();
                    self.bulk_out.fill(now, left, buf, &mut self.bulk_serials);
                }
                if large_fresh || !self.bulk_serials.is_empty() {
                    self.bulk_credit -= bulk_token;
                }
                let mut eliciting = buf.len() > header_len;
                if !eliciting && now >= self.last_send + self.cfg.keepalive {
                    wire::encode_frame(&Frame::Ping, buf);
                    eliciting = true;
                }
                self.ack_owed = None;
                self.lazy_ack_owed = None;
                self.eliciting_unacked = 0;
                if !self.seal(now, buf, eliciting) {
                    return false;
                }
                if free {
                    self.credit = credit_before;
                }
                true
            }
        }
    }

    /// Bulk bytes queued or sent and not yet acknowledged.
    pub(crate) fn bulk_pending(&self) -> usize {
        self.bulk_out.pending_bytes()
    }

    /// Smoothed RTT, jitter, loss and the RTT tail: the part of
    /// [`Connection::stats`] read for every connection several times a
    /// second (a relay's link pass, a peer's every pump), without the rate
    /// meters' walks.
    pub(crate) fn estimate(&self) -> LinkEstimate {
        LinkEstimate {
            rtt: self.rtt.srtt_or(Duration::ZERO),
            jitter: self.rtt.rttvar(),
            loss: self.sent.loss(),
            rtt_p99: self.rtt.p99().unwrap_or(Duration::ZERO),
        }
    }

    /// What this connection holds in memory, by part (`inline`: its own
    /// fields; an endpoint adds what it wraps the connection in).
    pub(crate) fn memory(&self) -> super::ConnMemory {
        let events: usize = self
            .events
            .iter()
            .map(|e| match e {
                ConnEvent::Message(m) => m.capacity(),
                _ => 0,
            })
            .sum();
        super::ConnMemory {
            inline: std::mem::size_of::<Self>(),
            sent: self.sent.heap_bytes(),
            incoming: self.inc.heap_bytes(),
            outgoing: self.out.heap_bytes(),
            bulk: self.bulk_out.pending_bytes() + self.bulk_in.buffered(),
            other: self.plain.capacity()
                + self.events.capacity() * std::mem::size_of::<ConnEvent>()
                + events
                + self.ack_events.capacity() * std::mem::size_of::<AckEvent>(),
        }
    }

    pub(crate) fn stats(&self) -> LinkStats {
        let now = self.now;
        let LinkEstimate {
            rtt,
            jitter,
            loss,
            rtt_p99,
        } = self.estimate();
        LinkStats {
            rtt,
            rtt_p99,
            jitter,
            rto: self.rtt.rto(),
            loss,
            sent_bps: self.sent_bytes.per_sec(now),
            recv_bps: self.recv_bytes.per_sec(now),
            acked_bps: self.acked_bytes.per_sec(now),
            sent_pps: self.sent_packets.per_sec(now),
            recv_pps: self.recv_packets.per_sec(now),
            packets_sent: self.packets_sent,
            packets_received: self.packets_received,
            packets_lost: self.sent.total_lost,
            packets_acked: self.sent.total_acked,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            mode: self.congestion.mode(),
            redundancy_copies: self.out.copies,
            unacked: self.out.unacked() + self.bulk_out.pending_fragments(),
            bulk_pending_bytes: self.bulk_out.pending_bytes(),
            dropped_auth: self.dropped_auth,
            dropped_replay: self.dropped_replay,
            dropped_malformed: self.dropped_malformed,
            bulk_refused: self.bulk_in.refused,
            bulk_expired: self.bulk_in.expired,
            reorder_refused: self.inc.reorder_refused,
        }
    }
}

/// Why a payload was not encrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unsealable;

/// Encrypts, in place, the payload after the authenticated header at the
/// start of `buf`. Fails, leaving `buf` untouched, when that header does
/// not decode: the payload's start is then unknown, and encrypting from a
/// guess (or not at all, as once happened here) could send it in the clear.
pub(crate) fn encrypt_payload(
    cipher: &PayloadCipher,
    counter: u64,
    buf: &mut [u8],
) -> Result<(), Unsealable> {
    let (_, header_len) = wire::decode_header(buf).map_err(|_| Unsealable)?;
    let payload = buf.get_mut(header_len..).ok_or(Unsealable)?;
    cipher.apply(counter, payload);
    Ok(())
}

#[cfg(test)]
mod seal_tests;
