//! Routing a rejoin: the connection's token (token mode) must grant that
//! match and slot; the match room checks the hold and the secret and, if it
//! takes the player back, the connection is seated in its old slot.

use super::Router;
use lockstep::Instant;
use lockstep::low_level::proto::{RejectReason, Rejoin};
use lockstep::low_level::transport::ConnId;
use lockstep::token::{Refusal, TokenKind};

impl Router {
    /// A connection asks to come back into a held slot; `from`: it kept its
    /// world and holds every turn before this one (a reconnect).
    pub(super) fn rejoin(
        &mut self,
        now: Instant,
        conn: ConnId,
        rejoin: &Rejoin,
        from: Option<sim::Turn>,
    ) {
        let join = &rejoin.join;
        if self.draining {
            self.refuse_rejoin(conn, rejoin, RejectReason::ShuttingDown, None, None);
            return;
        }
        let claims = self.conns.get(&conn).and_then(|c| c.claims.clone());
        if let Some(c) = &claims {
            let refusal = if c.match_name != join.match_name {
                Some(Refusal::WrongMatch)
            } else if c.kind != TokenKind::Player {
                Some(Refusal::WrongKind)
            } else if c.slot != rejoin.player.0 {
                Some(Refusal::WrongSlot)
            } else {
                None
            };
            if let Some(refusal) = refusal {
                self.out.counters.rejoins_refused += 1;
                self.refuse_token(conn, join, refusal);
                return;
            }
        }
        let Some(&id) = self.names.get(&join.match_name) else {
            let d = format!("no running match named {:?}", join.match_name);
            self.refuse_rejoin(conn, rejoin, RejectReason::HoldExpired, Some(d), None);
            return;
        };
        if let Some(c) = &claims
            && self.wrong_instance(now, c, Some(id))
        {
            self.out.counters.rejoins_refused += 1;
            self.refuse_token(conn, join, Refusal::WrongInstance);
            return;
        }
        let Some(m) = self.matches.get_mut(&id) else {
            return;
        };
        match m.rejoin(
            now,
            conn,
            rejoin,
            from,
            claims.is_some(),
            &self.config,
            &mut self.out,
        ) {
            Ok(player) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.room = Some((id, Some(player)));
                }
                self.admit_token(id, claims.as_ref());
            }
            Err((reason, detail)) => self.refuse_rejoin(conn, rejoin, reason, detail, None),
        }
        // A taken-over slot's old connection leaves the match.
        self.reap(id);
    }

    /// A connection asks to watch a running match; `from`: it kept its
    /// world and holds every turn before this one (a rewatch).
    pub(super) fn spectate(
        &mut self,
        now: Instant,
        conn: ConnId,
        join: &lockstep::low_level::proto::Join,
        from: Option<sim::Turn>,
    ) {
        if self.refused_at_the_door(conn, join, false) {
            return;
        }
        // Token mode: only a spectator token for the match admits a spectator.
        let claims = self.conns.get(&conn).and_then(|c| c.claims.clone());
        if let Some(c) = &claims {
            let refusal = if c.match_name != join.match_name {
                Some(Refusal::WrongMatch)
            } else if c.kind != TokenKind::Spectator {
                Some(Refusal::WrongKind)
            } else {
                None
            };
            if let Some(refusal) = refusal {
                self.refuse_token(conn, join, refusal);
                return;
            }
        }
        let Some(&id) = self.names.get(&join.match_name) else {
            let d = format!("no running match named {:?}", join.match_name);
            self.reject(conn, join, RejectReason::HoldExpired, Some(d), None);
            return;
        };
        if let Some(c) = &claims
            && self.wrong_instance(now, c, Some(id))
        {
            self.refuse_token(conn, join, Refusal::WrongInstance);
            return;
        }
        let Some(m) = self.matches.get_mut(&id) else {
            return;
        };
        match m.spectate(now, conn, join, from, &self.config, &mut self.out) {
            Ok(()) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.spectating = Some(id);
                }
                self.admit_token(id, claims.as_ref());
            }
            Err((reason, detail)) => self.reject(conn, join, reason, detail, None),
        }
    }

    fn refuse_rejoin(
        &mut self,
        conn: ConnId,
        rejoin: &Rejoin,
        reason: RejectReason,
        detail: Option<String>,
        token: Option<Refusal>,
    ) {
        self.out.counters.rejoins_refused += 1;
        self.reject(conn, &rejoin.join, reason, detail, token);
    }

    /// Memory held by snapshot stores of all matches: (snapshot bytes,
    /// upload bytes, tail bytes, tail turns), for the metrics.
    #[must_use]
    pub fn snapshot_memory(&self) -> (usize, usize, usize, usize) {
        self.matches
            .values()
            .map(|m| m.snapshot_memory())
            .fold((0, 0, 0, 0), |a, b| {
                (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::rejoin_config::RejoinConfig;
    use lockstep::low_level::proto::{Join, Notice, Rejoin, RejoinSecret, ToPeer, ToRelay};
    use sim::{PlayerId, Turn};
    use std::net::{Ipv4Addr, SocketAddr};

    fn join() -> Join {
        crate::test_support::join("m", "p")
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    }

    /// A started 2-player match whose player 1 (connection 1) disconnected
    /// at 1 s; returns its secret.
    fn dropped(claims: Option<TokenClaims>) -> (Router, RejoinSecret) {
        let config = RelayConfig {
            rejoin: RejoinConfig {
                key: crate::rejoin_config::RejoinKey::from_bytes(&[3; 32]).unwrap(),
                ..RejoinConfig::default()
            },
            ..RelayConfig::default()
        };
        let mut r = Router::new(config);
        let now = Instant::from_millis(10);
        for c in 0..2u32 {
            let claims = claims.clone().map(|mut k| {
                k.slot = c as u8;
                k
            });
            r.handle_connected_with_claims(now, ConnId(c), addr(5000 + c as u16), claims);
            r.handle_message(now, ConnId(c), &ToRelay::Join(join()).to_bytes());
        }
        let mut secret = None;
        while let Some((conn, _, bytes)) = r.poll_outgoing() {
            if let (ConnId(1), Ok(ToPeer::RejoinSecret(s))) = (conn, ToPeer::decode(&bytes)) {
                secret = Some(s);
            }
        }
        r.handle_disconnected(Instant::from_millis(1_000), ConnId(1));
        (r, secret.unwrap())
    }

    /// Connection 9 sends a rejoin at `at`; what it got back.
    fn rejoin(r: &mut Router, at: Instant, player: u8, secret: RejoinSecret) -> Vec<ToPeer> {
        while r.poll_outgoing().is_some() {}
        r.handle_connected(at, ConnId(9), addr(6000));
        let msg = ToRelay::Rejoin(Rejoin {
            join: join(),
            player: PlayerId(player),
            secret,
        });
        r.handle_message(at, ConnId(9), &msg.to_bytes());
        std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| *c == ConnId(9))
            .filter_map(|(_, _, b)| ToPeer::decode(&b).ok())
            .collect()
    }

    fn refusal(got: &[ToPeer]) -> Option<RejectReason> {
        got.iter().find_map(|m| match m {
            ToPeer::Rejected { reason, .. } => Some(*reason),
            _ => None,
        })
    }

    /// Before: secrets were derived from the key, the match's number, name
    /// and slot only, and numbers restart at 1 with each process, so a
    /// player of an earlier match "m" (number 1) held the secret of the
    /// same seat in every later one.
    #[test]
    fn a_secret_of_an_earlier_match_with_the_same_name_and_number_is_refused() {
        // Two processes, one key file: the earlier match and the later one.
        let (_earlier, old) = dropped(None);
        let (mut r, secret) = dropped(None);
        assert_ne!(old, secret, "the instance's nonce is in the secret");
        let soon = Instant::from_millis(2_000);
        assert_eq!(
            refusal(&rejoin(&mut r, soon, 1, old)),
            Some(RejectReason::WrongSecret)
        );
        r.handle_disconnected(soon, ConnId(9));
        assert_eq!(refusal(&rejoin(&mut r, soon, 1, secret)), None);
        assert_eq!(r.counters().rejoins, 1);
    }

    #[test]
    fn a_wrong_secret_a_wrong_slot_and_an_expired_hold_are_refused_by_reason() {
        let (mut r, secret) = dropped(None);
        let soon = Instant::from_millis(2_000);
        let other = RejoinSecret([0xAA; 16]);
        assert_eq!(
            refusal(&rejoin(&mut r, soon, 1, other)),
            Some(RejectReason::WrongSecret)
        );
        r.handle_disconnected(soon, ConnId(9));
        // Slot 1's secret does not open slot 0 (in play); slot 5 does not exist.
        assert_eq!(
            refusal(&rejoin(&mut r, soon, 0, secret)),
            Some(RejectReason::WrongSecret)
        );
        r.handle_disconnected(soon, ConnId(9));
        assert_eq!(
            refusal(&rejoin(&mut r, soon, 5, secret)),
            Some(RejectReason::WrongSlot)
        );
        r.handle_disconnected(soon, ConnId(9));
        // Held 120 s from the drop at 1 s.
        let late = Instant::from_millis(1_000 + 120_001);
        assert_eq!(
            refusal(&rejoin(&mut r, late, 1, secret)),
            Some(RejectReason::HoldExpired)
        );
        assert_eq!(r.counters().rejoins_refused, 4);
        assert_eq!(r.counters().rejoins, 0);
    }

    #[test]
    fn the_right_secret_resumes_and_the_catch_up_is_announced_in_a_bundle() {
        let (mut r, secret) = dropped(None);
        let at = Instant::from_millis(2_000);
        let got = rejoin(&mut r, at, 1, secret);
        let Some(ToPeer::Resume(resume)) = got.first() else {
            panic!("{got:?}");
        };
        assert_eq!(resume.start.your_player, PlayerId(1));
        // No snapshot agreed yet: the tail reaches back to the first turn.
        assert_eq!(resume.snapshot, None);
        let tail: Vec<Turn> = got
            .iter()
            .filter_map(|m| match m {
                ToPeer::Bundle(b) => Some(b.turn),
                _ => None,
            })
            .collect();
        assert_eq!(tail, (0..resume.live.0).map(Turn).collect::<Vec<_>>());
        assert_eq!(r.counters().rejoins, 1);
        // The rejoiner's input does not count before it caught up.
        let before = r.counters().inputs_refused;
        let input = ToRelay::Input {
            turn: resume.live,
            commands: vec![],
        };
        r.handle_message(at, ConnId(9), &input.to_bytes());
        assert_eq!(r.counters().inputs_refused, before + 1);
        let caught = ToRelay::CaughtUp {
            turn: Turn(resume.live.0 - 1),
        };
        r.handle_message(at, ConnId(9), &caught.to_bytes());
        let back = std::iter::from_fn(|| r.poll_event()).find_map(|e| match e {
            RouterEvent::Rejoined { player, turn, .. } => Some((player, turn)),
            _ => None,
        });
        let (player, turn) = back.unwrap();
        assert_eq!(player, PlayerId(1));
        r.handle_timeout(Instant::from_millis(2_500));
        let notice = std::iter::from_fn(|| r.poll_outgoing())
            .filter_map(|(_, _, b)| match ToPeer::decode(&b) {
                Ok(ToPeer::Bundle(b)) => Some(b.notices),
                _ => None,
            })
            .flatten()
            .find(|n| matches!(n, Notice::PlayerRejoined { .. }));
        assert_eq!(notice, Some(Notice::PlayerRejoined { player, turn }));
    }

    /// A restarted player is back before the relay noticed its old
    /// connection died: its secret takes the slot over, the old connection
    /// no longer counts.
    #[test]
    fn the_right_secret_takes_over_a_slot_whose_old_connection_is_silent() {
        let (mut r, _) = dropped(None);
        let at = Instant::from_millis(1_500);
        let secret0 = secret_of_player_0(&r);
        let got = rejoin(&mut r, at, 0, secret0);
        assert!(matches!(got.first(), Some(ToPeer::Resume(_))), "{got:?}");
        // The old connection's messages no longer reach the match.
        let before = r.counters().bad_state;
        r.handle_message(at, ConnId(0), &ToRelay::Leave.to_bytes());
        assert_eq!(r.counters().bad_state, before + 1);
    }

    /// Player 0's secret, as its peer got it.
    fn secret_of_player_0(r: &Router) -> RejoinSecret {
        let m = r.matches.values().next().unwrap();
        r.config()
            .rejoin
            .secret(m.id, m.nonce(), &m.name, PlayerId(0))
    }

    /// A leaked secret cannot take the slot of a player that is playing:
    /// the rejoin is refused by a typed reason and the player plays on.
    /// Once that connection has been silent for `takeover_after`, it can.
    #[test]
    fn the_right_secret_does_not_take_over_a_slot_whose_connection_plays() {
        let (mut r, _) = dropped(None);
        let secret0 = secret_of_player_0(&r);
        let heard = Instant::from_millis(1_400);
        let input = ToRelay::Input {
            turn: Turn(0),
            commands: vec![],
        };
        r.handle_message(heard, ConnId(0), &input.to_bytes());
        let takeover = r.config().rejoin.takeover_after;
        let at = heard + takeover - lockstep::Duration::from_millis(1);
        assert_eq!(
            refusal(&rejoin(&mut r, at, 0, secret0)),
            Some(RejectReason::SlotInUse)
        );
        r.handle_disconnected(at, ConnId(9));
        // The player is still seated: its messages reach the match.
        let before = r.counters().bad_state;
        r.handle_message(at, ConnId(0), &input.to_bytes());
        assert_eq!(r.counters().bad_state, before);
        assert_eq!(r.counters().rejoins, 0);
        // Silent for `takeover_after` since: a crashed process, taken over.
        let got = rejoin(&mut r, at + takeover, 0, secret0);
        assert!(matches!(got.first(), Some(ToPeer::Resume(_))), "{got:?}");
        assert_eq!(r.counters().rejoins, 1);
    }

    /// Two processes rejoin one slot with its secret: the second is refused
    /// at once with `SlotTaken` (typed, not retried by the peer), it does
    /// not get a `Resume` it can never play from.
    #[test]
    fn of_two_rejoins_into_one_slot_the_second_is_refused() {
        let (mut r, secret) = dropped(None);
        let at = Instant::from_millis(2_000);
        let got = rejoin(&mut r, at, 1, secret);
        assert!(matches!(got.first(), Some(ToPeer::Resume(_))), "{got:?}");
        while r.poll_outgoing().is_some() {}
        r.handle_connected(at, ConnId(10), addr(6010));
        let msg = ToRelay::Rejoin(Rejoin {
            join: join(),
            player: PlayerId(1),
            secret,
        });
        r.handle_message(at, ConnId(10), &msg.to_bytes());
        let got: Vec<ToPeer> = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| *c == ConnId(10))
            .filter_map(|(_, _, b)| ToPeer::decode(&b).ok())
            .collect();
        assert_eq!(refusal(&got), Some(RejectReason::SlotTaken), "{got:?}");
        assert!(!got.iter().any(|m| matches!(m, ToPeer::Resume(_))));
        // Once the race window is over, a rejoin while the winner plays is
        // the ordinary `SlotInUse` (a leaked secret, a restart to retry).
        let later = at + lockstep::Duration::from_secs(11);
        let input = ToRelay::Input {
            turn: Turn(0),
            commands: vec![],
        };
        r.handle_message(later, ConnId(9), &input.to_bytes());
        while r.poll_outgoing().is_some() {}
        r.handle_message(later, ConnId(10), &msg.to_bytes());
        let got: Vec<ToPeer> = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| *c == ConnId(10))
            .filter_map(|(_, _, b)| ToPeer::decode(&b).ok())
            .collect();
        assert_eq!(refusal(&got), Some(RejectReason::SlotInUse), "{got:?}");
    }

    #[test]
    fn in_token_mode_the_token_must_grant_the_slot_not_the_secret() {
        let claims = TokenClaims::new(1, "m", 0, 0, 60);
        let (mut r, _) = dropped(Some(claims.clone()));
        let at = Instant::from_millis(2_000);
        // A token for slot 0 cannot take slot 1 back.
        let mut wrong = claims.clone();
        wrong.slot = 0;
        while r.poll_outgoing().is_some() {}
        r.handle_connected_with_claims(at, ConnId(8), addr(6001), Some(wrong));
        let msg = ToRelay::Rejoin(Rejoin {
            join: join(),
            player: PlayerId(1),
            secret: RejoinSecret([0; 16]),
        });
        r.handle_message(at, ConnId(8), &msg.to_bytes());
        let refused = r.poll_refusal().unwrap();
        assert_eq!(refused.reason, RejectReason::WrongSlot);
        // A token for slot 1 can, whatever the secret.
        let mut right = claims;
        right.slot = 1;
        r.handle_connected_with_claims(at, ConnId(7), addr(6002), Some(right));
        r.handle_message(at, ConnId(7), &msg.to_bytes());
        let resumed = std::iter::from_fn(|| r.poll_outgoing())
            .any(|(c, _, b)| c == ConnId(7) && matches!(ToPeer::decode(&b), Ok(ToPeer::Resume(_))));
        assert!(resumed);
    }

    /// Sends `msg` on a new connection holding `claims`; the refusal
    /// queued for it (reason and token refusal), if any, and what it got.
    fn send_with(
        r: &mut Router,
        conn: u32,
        claims: TokenClaims,
        msg: &ToRelay,
    ) -> (Option<(RejectReason, Option<Refusal>)>, Vec<ToPeer>) {
        let at = Instant::from_millis(2_000);
        while r.poll_outgoing().is_some() {}
        r.handle_connected_with_claims(at, ConnId(conn), addr(7000 + conn as u16), Some(claims));
        r.handle_message(at, ConnId(conn), &msg.to_bytes());
        let refused = r.poll_refusal().map(|f| (f.reason, f.token));
        let got = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| *c == ConnId(conn))
            .filter_map(|(_, _, b)| ToPeer::decode(&b).ok())
            .collect();
        (refused, got)
    }

    #[test]
    fn a_spectator_token_watches_but_never_plays_and_a_player_token_never_watches() {
        let player = TokenClaims::new(1, "m", 0, 0, 60);
        let spectator = TokenClaims::spectator(1, "m", 0, 60);
        let (mut r, _) = dropped(Some(player.clone()));
        let rejoin = ToRelay::Rejoin(Rejoin {
            join: join(),
            player: PlayerId(1),
            secret: RejoinSecret([0; 16]),
        });
        // A spectator token cannot take the held slot back.
        let (refused, got) = send_with(&mut r, 8, spectator.clone(), &rejoin);
        assert_eq!(
            refused,
            Some((RejectReason::WrongTokenKind, Some(Refusal::WrongKind)))
        );
        assert!(
            !got.iter().any(|m| matches!(m, ToPeer::Resume(_))),
            "{got:?}"
        );
        // A player token (even the held slot's) cannot watch.
        let mut slot1 = player;
        slot1.slot = 1;
        let spectate = ToRelay::Spectate(join());
        let (refused, _) = send_with(&mut r, 9, slot1, &spectate);
        assert_eq!(
            refused,
            Some((RejectReason::WrongTokenKind, Some(Refusal::WrongKind)))
        );
        assert_eq!(r.counters().token_wrong_kind, 2);
        assert_eq!(r.counters().rejoins, 0);
        // A spectator token for the match watches it.
        let (refused, got) = send_with(&mut r, 10, spectator.clone(), &spectate);
        assert_eq!(refused, None);
        assert!(
            matches!(got.first(), Some(ToPeer::Resume(resume)) if resume.spectator),
            "{got:?}"
        );
        // ... but not another match.
        let mut elsewhere = spectator;
        elsewhere.match_name = "other".into();
        let (refused, _) = send_with(&mut r, 11, elsewhere, &spectate);
        assert_eq!(refused.map(|f| f.0), Some(RejectReason::WrongMatch));
    }

    #[test]
    fn a_spectator_token_cannot_join_a_lobby_as_a_player() {
        let mut r = Router::new(RelayConfig::default());
        let spectator = TokenClaims::spectator(1, "m", 0, 60);
        let (refused, _) = send_with(&mut r, 1, spectator, &ToRelay::Join(join()));
        assert_eq!(
            refused,
            Some((RejectReason::WrongTokenKind, Some(Refusal::WrongKind)))
        );
        assert_eq!(r.counters().token_wrong_kind, 1);
        assert!(r.matches.is_empty(), "no lobby was created");
    }
}
