//! Token mode: the join-token match instance each match is bound to, and
//! the instances of matches that ended, remembered until their tokens
//! expire, so that a token admits only the match it was issued for.
//!
//! Match names are reused (a matchmaker names rooms after a queue; a relay
//! numbers its matches from 1 again after a restart), and before this a
//! token checked only the name: a player of an earlier match "ranked-7"
//! could, with its unexpired token, join (or open) a later "ranked-7". A
//! match is bound to the instance of the first token admitted to it
//! ([`crate::TokenBinding`]); a token of another instance is refused with
//! [`lockstep::token::Refusal::WrongInstance`]. The binding is in the match's recording, so
//! a resumed relay keeps it. When the match ends the relay keeps
//! (name, instance) until the latest expiry among the tokens it admitted:
//! while it is kept, a token of that instance cannot open a new match of
//! the name. At most [`crate::limits::Limits::max_matches`] ended matches
//! are kept (about 100 bytes each); when the table is full, the entry
//! expiring soonest goes first (its tokens have the least time left). The
//! table is not persisted: a restarted relay forgets the matches that ended
//! before it (running ones are resumed with their binding).

use super::Router;
use crate::event::{MatchId, TokenBinding};
use lockstep::Instant;
use lockstep::token::{MatchInstance, TokenClaims};
use std::collections::BTreeMap;

/// Ended matches' (name, instance), each with the Unix second its last
/// admitted token expires.
#[derive(Debug, Default)]
pub(super) struct EndedMatches {
    map: BTreeMap<(String, MatchInstance), u64>,
}

impl EndedMatches {
    /// Remembers that the match `name` bound to `binding` ended; with
    /// `cap` entries kept already, the one expiring soonest (an expired
    /// one, if any) makes room first.
    pub(super) fn remember(&mut self, name: &str, binding: TokenBinding, cap: usize) {
        if cap == 0 {
            return;
        }
        while self.map.len() >= cap {
            let soonest = self
                .map
                .iter()
                .min_by_key(|&(_, &expire)| expire)
                .map(|(k, _)| k.clone());
            match soonest {
                Some(k) => self.map.remove(&k),
                None => break,
            };
        }
        let expire = self
            .map
            .entry((name.to_owned(), binding.instance))
            .or_insert(0);
        *expire = (*expire).max(binding.expire_unix);
    }

    /// Whether a match `name` of `instance` ended and some token it
    /// admitted is still unexpired at `unix`; drops the entry once expired.
    pub(super) fn ended(&mut self, name: &str, instance: MatchInstance, unix: u64) -> bool {
        let key = (name.to_owned(), instance);
        match self.map.get(&key) {
            Some(&expire) if unix < expire => true,
            Some(_) => {
                self.map.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Entries kept (for tests and the bound).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

impl Router {
    /// Tells the router that `now` is `unix_secs` on the wall clock, as the
    /// transport server is told (`Server::set_unix_time`): join tokens name
    /// their expiry in Unix seconds, and the router remembers an ended
    /// match's token instance until then. Call it when the driver starts
    /// (and whenever it re-anchors the server's clock). Without it the
    /// router counts Unix seconds from its own `Instant` zero.
    pub fn set_unix_time(&mut self, now: Instant, unix_secs: u64) {
        self.unix_at_zero = unix_secs.saturating_sub(now.as_micros() / 1_000_000);
    }

    fn unix_now(&self, now: Instant) -> u64 {
        self.unix_at_zero
            .saturating_add(now.as_micros() / 1_000_000)
    }

    /// Whether `claims` are of another instance than the match they ask to
    /// enter: the running or waiting match `room` is bound to another one,
    /// or (no such match) a match of that name and instance ended and its
    /// tokens are not all expired, so the token cannot open a new one.
    pub(super) fn wrong_instance(
        &mut self,
        now: Instant,
        claims: &TokenClaims,
        room: Option<MatchId>,
    ) -> bool {
        match room {
            Some(id) => self
                .matches
                .get(&id)
                .and_then(crate::matchroom::MatchRoom::token)
                .is_some_and(|t| t.instance != claims.instance),
            None => {
                let unix = self.unix_now(now);
                self.ended.ended(&claims.match_name, claims.instance, unix)
            }
        }
    }

    /// Binds match `id` to the instance of the token just admitted to it
    /// (if unbound) and keeps its latest expiry.
    pub(super) fn admit_token(&mut self, id: MatchId, claims: Option<&TokenClaims>) {
        if let Some(c) = claims
            && let Some(m) = self.matches.get_mut(&id)
        {
            m.admit_token(c);
        }
    }

    /// Keeps the binding of match `name`, which ended (see the module docs).
    pub(super) fn remember_ended(&mut self, name: &str, binding: Option<TokenBinding>) {
        if let Some(b) = binding {
            let cap = self.config.limits.max_matches;
            self.ended.remember(name, b, cap);
        }
    }
}
