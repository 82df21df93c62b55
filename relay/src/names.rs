//! Display names unique within a match. Peers choose their own names and
//! two peers started with default settings both call themselves `bot1`;
//! logs, replays (`replay info` lists players by name) and the peers' own
//! output would then not say who is who. The relay keeps the first holder's
//! name and gives every later duplicate the smallest free `#k` suffix
//! (`bot1`, `bot1#2`, `bot1#3`), in slot order, so every peer receives the
//! same list in `Start`.

use lockstep::low_level::proto::MAX_NAME_LEN;
use std::collections::BTreeSet;

/// Makes `names` (in slot order) pairwise distinct: a later duplicate of an
/// earlier name gets the smallest `#k` (k ≥ 2) that no player's name uses,
/// truncating the name (at a character boundary) so the result stays within
/// [`MAX_NAME_LEN`] bytes. Names already distinct are left as they are.
pub(crate) fn make_unique(names: &mut [String]) {
    let original: BTreeSet<String> = names.iter().cloned().collect();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for name in names.iter_mut() {
        if taken.insert(name.clone()) {
            continue;
        }
        let unique = (2u32..)
            .map(|k| with_suffix(name, &format!("#{k}")))
            .find(|c| !taken.contains(c) && !original.contains(c))
            // At most 32 players: one of the first 33 suffixes is free,
            // so the fallback is unreachable.
            .unwrap_or_default();
        taken.insert(unique.clone());
        *name = unique;
    }
}

/// `name` + `suffix`, with `name` cut so the whole fits in [`MAX_NAME_LEN`].
fn with_suffix(name: &str, suffix: &str) -> String {
    let mut end = name.len().min(MAX_NAME_LEN.saturating_sub(suffix.len()));
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &name[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConnId, RelayConfig, Router};
    use lockstep::Instant;
    use lockstep::low_level::proto::ToPeer;
    use std::net::{Ipv4Addr, SocketAddr};

    fn unique(names: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        make_unique(&mut v);
        v
    }

    #[test]
    fn duplicates_get_the_smallest_free_suffix_and_distinct_names_stay() {
        assert_eq!(unique(&["bot1", "bot1"]), ["bot1", "bot1#2"]);
        assert_eq!(unique(&["a", "b", "c"]), ["a", "b", "c"]);
        assert_eq!(
            unique(&["bot1", "bot1", "bot1#2", "bot1"]),
            ["bot1", "bot1#3", "bot1#2", "bot1#4"]
        );
        assert_eq!(unique(&["", ""]), ["", "#2"]);
    }

    #[test]
    fn a_suffixed_name_stays_within_the_wire_limit() {
        let long = "é".repeat(MAX_NAME_LEN / 2); // 64 bytes of 2-byte chars
        let got = unique(&[&long, &long]);
        assert_eq!(got[0], long);
        assert!(
            got[1].len() <= MAX_NAME_LEN && got[1].ends_with("#2"),
            "{}",
            got[1]
        );
        assert_ne!(got[0], got[1]);
    }

    /// Two peers with default settings (both `bot1`) join one match: the
    /// relay's `Start` names them `bot1` and `bot1#2`, for both peers alike.
    #[test]
    fn the_router_starts_a_match_of_two_bot1s_with_distinct_names() {
        let mut r = Router::new(RelayConfig::default());
        let now = Instant::from_millis(10);
        for c in 0..2u32 {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 5000 + c as u16));
            assert!(r.handle_connected(now, ConnId(c), addr));
            let join = crate::test_support::join_bytes("m", "bot1");
            r.handle_message(now, ConnId(c), &join);
        }
        let mut lists = Vec::new();
        while let Some((_, _, bytes)) = r.poll_outgoing() {
            if let Ok(ToPeer::Start(s)) = ToPeer::decode(&bytes) {
                lists.push(s.players.iter().map(|p| p.name.clone()).collect::<Vec<_>>());
            }
        }
        assert_eq!(lists.len(), 2);
        for names in &lists {
            assert_eq!(names, &["bot1", "bot1#2"]);
        }
    }
}
