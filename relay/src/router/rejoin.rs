//! Routing a rejoin: the connection's token (token mode) must grant that
//! match and slot; the match room checks the hold and the secret and, if it
//! takes the player back, the connection is seated in its old slot.

use super::Router;
use lockstep::Instant;
use lockstep::proto::{RejectReason, Rejoin};
use lockstep::token::Refusal;
use lockstep::transport::ConnId;

impl Router {
    /// A connection asks to come back into a held slot.
    pub(super) fn rejoin(&mut self, now: Instant, conn: ConnId, rejoin: &Rejoin) {
        let join = &rejoin.join;
        if self.draining {
            self.refuse_rejoin(conn, rejoin, RejectReason::ShuttingDown, None, None);
            return;
        }
        let claims = self.conns.get(&conn).and_then(|c| c.claims.clone());
        if let Some(c) = &claims {
            if c.match_name != join.match_name {
                self.out.counters.token_wrong_match += 1;
                let d = format!("the token admits match {:?}", c.match_name);
                self.refuse_rejoin(conn, rejoin, RejectReason::WrongMatch, Some(d), Some(Refusal::WrongMatch));
                return;
            }
            if c.slot != rejoin.player.0 {
                self.out.counters.token_wrong_slot += 1;
                let d = format!("the token admits slot {}", c.slot);
                self.refuse_rejoin(conn, rejoin, RejectReason::WrongSlot, Some(d), Some(Refusal::WrongSlot));
                return;
            }
        }
        let Some(&id) = self.names.get(&join.match_name) else {
            let d = format!("no running match named {:?}", join.match_name);
            self.refuse_rejoin(conn, rejoin, RejectReason::HoldExpired, Some(d), None);
            return;
        };
        let Some(m) = self.matches.get_mut(&id) else {
            return;
        };
        match m.rejoin(now, conn, rejoin, claims.is_some(), &self.config, &mut self.out) {
            Ok(player) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.room = Some((id, Some(player)));
                }
            }
            Err((reason, detail)) => self.refuse_rejoin(conn, rejoin, reason, detail, None),
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
        self.matches.values().map(|m| m.snapshot_memory()).fold(
            (0, 0, 0, 0),
            |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3),
        )
    }
}
