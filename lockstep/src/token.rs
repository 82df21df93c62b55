//! Join tokens in the style of netcode.io connect tokens. A matchmaker holding
//! the relay's [`TokenKey`] issues a [`ConnectToken`] per player: a private part
//! sealed with XChaCha20-Poly1305 that only the relay can open (match name,
//! slot, and the two per-connection keys; protocol id and the create/expire
//! times are authenticated as associated data) and a public part telling the
//! client its keys, the expiry and where to connect. The connection keys never
//! cross the wire in the clear, so an on-path observer of the handshake cannot
//! forge packets (unlike open mode, where the keys come from the cookie).
//!
//! A token belongs to one match instance ([`MatchInstance`]): the
//! matchmaker draws one per match and puts it in every token of that match.
//! The relay binds a match to the instance of the first token it admits
//! for it, and refuses tokens of another instance of that name (a token of
//! an earlier match that had the same name) with [`Refusal::WrongInstance`].
//!
//! A token is of one [`TokenKind`]: a player token joins (and rejoins) only
//! its slot and cannot watch; a spectator token watches its match and can
//! never take a slot. The kind is sealed with the rest, so it cannot be
//! flipped without the key.
//!
//! Times are Unix seconds passed in by the caller; nothing here reads a clock.
//! Randomness is passed in too: [`issue_token`] takes 32 bytes of entropy and
//! derives the nonce and keys from it under the relay key, so even a weak
//! entropy source cannot make two different tokens share a nonce or expose
//! their keys to anyone without the key.

use crate::transport::auth::ConnKeys;
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use thiserror::Error;

/// Version of the token layout, authenticated with every sealed part
/// (2: the private part carries a [`TokenKind`] byte; 3: and a
/// [`MatchInstance`] after the match name). A relay opens only tokens of
/// its own version: an older token reads as forged.
pub const TOKEN_VERSION: u8 = 3;
/// Longest match name a token can carry, in UTF-8 bytes.
pub const MAX_MATCH_NAME: usize = 64;
/// Length of a [`MatchInstance`].
pub const INSTANCE_LEN: usize = 16;
/// Length of the XChaCha20 nonce; it doubles as the token id.
pub const NONCE_LEN: usize = 24;
/// Length of a symmetric key (token key and connection keys).
pub const KEY_LEN: usize = 32;
/// Length of the Poly1305 tag on the sealed part.
pub const AEAD_TAG_LEN: usize = 16;
/// Plaintext length of the private part: slot, kind, name length, name
/// (zero padded), match instance, two keys.
pub const PRIVATE_LEN: usize = 1 + 1 + 1 + MAX_MATCH_NAME + INSTANCE_LEN + 2 * KEY_LEN;
/// Length of the sealed private part (ciphertext and tag).
pub const SEALED_LEN: usize = PRIVATE_LEN + AEAD_TAG_LEN;
/// Bytes the sealed token occupies in a handshake packet (times, nonce, sealed part).
pub const SEALED_TOKEN_WIRE_LEN: usize = 8 + 8 + NONCE_LEN + SEALED_LEN;
/// Most relay addresses a public token lists.
pub const MAX_SERVERS: usize = 8;

const MAGIC: &[u8; 4] = b"LSJT";
/// Where the match name starts in the private part (after slot, kind, name length).
const NAME_AT: usize = 3;
/// Where the match instance starts in the private part (after the name field).
const INSTANCE_AT: usize = NAME_AT + MAX_MATCH_NAME;
/// Where the two connection keys start in the private part.
const KEYS_AT: usize = INSTANCE_AT + INSTANCE_LEN;
const AAD_CONTEXT: &[u8] = b"lockstep join token";
const SEAL_KEY_CONTEXT: &str = "lockstep join token v1 seal key";
const ISSUE_KEY_CONTEXT: &str = "lockstep join token v1 issue key";

/// Why a token could not be issued, encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TokenError {
    /// The match name exceeds [`MAX_MATCH_NAME`] bytes.
    #[error("match name of {len} bytes exceeds {MAX_MATCH_NAME}")]
    MatchNameTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// More than [`MAX_SERVERS`] relay addresses.
    #[error("{count} relay addresses exceed the limit of {MAX_SERVERS}")]
    TooManyServers {
        /// How many were given.
        count: usize,
    },
    /// The token would expire before (or when) it is created.
    #[error("token expires at {expire_unix}, not after its creation at {create_unix}")]
    BadLifetime {
        /// Creation time (Unix seconds).
        create_unix: u64,
        /// Expiry time (Unix seconds).
        expire_unix: u64,
    },
    /// The sealed part did not open under this key (forged, corrupted or another relay's).
    #[error("token does not open under this key (forged or corrupted)")]
    Forged,
    /// Every byte of the token key is zero: a placeholder anyone could
    /// issue tokens with, refused like an all-zero rejoin key.
    #[error("the token key is all zeros; draw it from a random source")]
    ZeroKey,
    /// Bytes that are not a token of this version.
    #[error("malformed token: {what} at offset {at}")]
    Malformed {
        /// Which field.
        what: &'static str,
        /// Its offset.
        at: usize,
    },
    /// Text that is not hex of the expected length.
    #[error("bad hex: {0}")]
    Hex(&'static str),
}

/// Why a token (or a connection admitted by one) was refused; each has a
/// counter in [`crate::transport::ServerCounters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A token-mode server got a request without a token.
    Missing,
    /// The token's expiry time has passed.
    Expired,
    /// The sealed part did not open (forged, bit-flipped or another key).
    Forged,
    /// The token was already used from another address.
    Reused,
    /// The token names another protocol id.
    WrongProtocol,
    /// The token names another match than the one the client asked to join.
    WrongMatch,
    /// The token names another slot than the one the client claims.
    WrongSlot,
    /// The used-token table is full of unexpired tokens.
    TableFull,
    /// The token is of the other [`TokenKind`]: a spectator token asked to
    /// play (join or rejoin a slot), or a player token asked to spectate.
    WrongKind,
    /// The token names the right match name but another [`MatchInstance`]:
    /// it was issued for an earlier (or another) match of that name, which
    /// the relay has bound to the instance of the first token it admitted.
    WrongInstance,
}

/// The relay's secret token key. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenKey([u8; KEY_LEN]);

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// A key from raw bytes (take them from a secure random source).
    #[must_use]
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// The raw key bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Lower-case hex (64 characters), e.g. for a key file.
    #[must_use]
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// A key from raw bytes, refusing an all-zero key (a placeholder, not
    /// a secret: anyone could issue tokens under it). Use this for keys
    /// read from a file or a flag.
    ///
    /// # Errors
    /// [`TokenError::ZeroKey`].
    pub fn try_from_bytes(bytes: [u8; KEY_LEN]) -> Result<Self, TokenError> {
        if crate::transport::auth::ct_eq(&bytes, &[0; KEY_LEN]) {
            return Err(TokenError::ZeroKey);
        }
        Ok(Self(bytes))
    }

    /// Parses 64 hex characters (surrounding whitespace ignored); an
    /// all-zero key is refused ([`TokenKey::try_from_bytes`]).
    pub fn from_hex(text: &str) -> Result<Self, TokenError> {
        let bytes = from_hex(text.trim())?;
        let arr: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| TokenError::Hex("a token key is 64 hex characters"))?;
        Self::try_from_bytes(arr)
    }

    fn seal_cipher(&self) -> XChaCha20Poly1305 {
        let k = blake3::derive_key(SEAL_KEY_CONTEXT, &self.0);
        XChaCha20Poly1305::new(&Key::from(k))
    }
}

/// What a token lets its holder do in its match. Issue a spectator token to
/// someone who should watch (a caster, a friend, a referee): it can never take
/// a player's slot, and a player's token cannot be used to watch another view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// Join (and rejoin) the match in the token's slot; never spectate.
    #[default]
    Player,
    /// Watch the match as a spectator (the slot is ignored); never play.
    Spectator,
}

impl TokenKind {
    const fn to_byte(self) -> u8 {
        match self {
            Self::Player => 0,
            Self::Spectator => 1,
        }
    }

    const fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Player),
            1 => Some(Self::Spectator),
            _ => None,
        }
    }
}

/// Which match, of all matches ever played under one name, a token
/// belongs to: 16 random bytes the matchmaker draws once per match and puts
/// in every token of it ([`TokenClaims::with_instance`]). Match names are
/// reused (a relay numbers matches from 1 again after a restart, a
/// matchmaker names rooms after a queue), and the relay refuses a token
/// whose instance is not the one its match was bound to, so a token of an
/// earlier match of the same name cannot enter a later one.
///
/// [`MatchInstance::UNBOUND`] (all zeros) is what a token carries when the
/// issuer sets none: every such token of a name has the same instance, so
/// the relay cannot tell their matches apart (the behaviour of version 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MatchInstance(pub [u8; INSTANCE_LEN]);

impl MatchInstance {
    /// The instance of tokens whose issuer set none (all zeros).
    pub const UNBOUND: Self = Self([0; INSTANCE_LEN]);

    /// Lower-case hex (32 characters), e.g. to pass to `relay token --instance`.
    #[must_use]
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// Parses 32 hex characters (surrounding whitespace ignored).
    ///
    /// # Errors
    /// [`TokenError::Hex`] for text that is not 32 hex digits.
    pub fn from_hex(text: &str) -> Result<Self, TokenError> {
        let bytes = from_hex(text.trim())?;
        let arr: [u8; INSTANCE_LEN] = bytes
            .try_into()
            .map_err(|_| TokenError::Hex("a match instance is 32 hex characters"))?;
        Ok(Self(arr))
    }
}

/// What a token asserts about its holder, readable only by the relay (and the issuer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenClaims {
    /// Application protocol id the token is valid for.
    pub protocol_id: u64,
    /// The match the holder may join (at most [`MAX_MATCH_NAME`] bytes).
    pub match_name: String,
    /// The slot (player position) the holder may take (0 and ignored for a spectator token).
    pub slot: u8,
    /// Whether the holder plays in `slot` or spectates.
    pub kind: TokenKind,
    /// The match instance the token belongs to ([`MatchInstance`]);
    /// [`MatchInstance::UNBOUND`] unless set with [`TokenClaims::with_instance`].
    pub instance: MatchInstance,
    /// When the token was issued (Unix seconds).
    pub create_unix: u64,
    /// First Unix second at which the token is no longer accepted.
    pub expire_unix: u64,
}

impl TokenClaims {
    /// Player claims issued at `now_unix`, valid for `valid_for_secs` seconds.
    #[must_use]
    pub fn new(
        protocol_id: u64,
        match_name: impl Into<String>,
        slot: u8,
        now_unix: u64,
        valid_for_secs: u64,
    ) -> Self {
        Self {
            protocol_id,
            match_name: match_name.into(),
            slot,
            kind: TokenKind::Player,
            instance: MatchInstance::UNBOUND,
            create_unix: now_unix,
            expire_unix: now_unix.saturating_add(valid_for_secs),
        }
    }

    /// Spectator claims for `match_name`, issued at `now_unix`, valid for
    /// `valid_for_secs` seconds: the holder may watch that match, never play.
    #[must_use]
    pub fn spectator(
        protocol_id: u64,
        match_name: impl Into<String>,
        now_unix: u64,
        valid_for_secs: u64,
    ) -> Self {
        Self {
            kind: TokenKind::Spectator,
            ..Self::new(protocol_id, match_name, 0, now_unix, valid_for_secs)
        }
    }

    /// The same claims for match instance `instance`. A matchmaker draws
    /// one instance per match (16 bytes from a secure random source) and
    /// issues every token of that match, players' and spectators', with it.
    #[must_use]
    pub const fn with_instance(mut self, instance: MatchInstance) -> Self {
        self.instance = instance;
        self
    }

    /// Whether these claims allow playing `match_name` in `slot`; the refusal
    /// says which differs (match first, then kind, then slot).
    pub fn admits(&self, match_name: &str, slot: u8) -> Result<(), Refusal> {
        if self.match_name != match_name {
            return Err(Refusal::WrongMatch);
        }
        if self.kind != TokenKind::Player {
            return Err(Refusal::WrongKind);
        }
        if self.slot != slot {
            return Err(Refusal::WrongSlot);
        }
        Ok(())
    }

    /// Whether these claims allow watching `match_name` as a spectator.
    pub fn admits_spectator(&self, match_name: &str) -> Result<(), Refusal> {
        if self.match_name != match_name {
            return Err(Refusal::WrongMatch);
        }
        if self.kind != TokenKind::Spectator {
            return Err(Refusal::WrongKind);
        }
        Ok(())
    }

    /// Whether the token is no longer valid at `now_unix`.
    #[must_use]
    pub const fn is_expired(&self, now_unix: u64) -> bool {
        now_unix >= self.expire_unix
    }
}

/// The sealed private part as the client forwards it in its handshake: the
/// authenticated clear fields, the nonce (= token id) and the ciphertext.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SealedToken {
    /// Protocol id (clear, authenticated).
    pub protocol_id: u64,
    /// Creation time, Unix seconds (clear, authenticated).
    pub create_unix: u64,
    /// Expiry time, Unix seconds (clear, authenticated).
    pub expire_unix: u64,
    /// XChaCha20 nonce; unique per token, so it is also the token id.
    pub nonce: [u8; NONCE_LEN],
    /// Ciphertext of the private part followed by the Poly1305 tag.
    pub sealed: [u8; SEALED_LEN],
}

impl fmt::Debug for SealedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedToken")
            .field("protocol_id", &self.protocol_id)
            .field("create_unix", &self.create_unix)
            .field("expire_unix", &self.expire_unix)
            .field("id", &to_hex(&self.nonce))
            .finish_non_exhaustive()
    }
}

impl SealedToken {
    /// Appends the wire form (create, expire, nonce, sealed; the protocol id travels in
    /// the handshake header).
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.create_unix.to_le_bytes());
        out.extend_from_slice(&self.expire_unix.to_le_bytes());
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.sealed);
    }

    /// Reads the wire form written by [`SealedToken::encode_body`]; `None` if `bytes` is
    /// not exactly [`SEALED_TOKEN_WIRE_LEN`] long.
    #[must_use]
    pub fn decode_body(protocol_id: u64, bytes: &[u8]) -> Option<Self> {
        if bytes.len() != SEALED_TOKEN_WIRE_LEN {
            return None;
        }
        let (create, rest) = bytes.split_at(8);
        let (expire, rest) = rest.split_at(8);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        Some(Self {
            protocol_id,
            create_unix: u64::from_le_bytes(create.try_into().ok()?),
            expire_unix: u64::from_le_bytes(expire.try_into().ok()?),
            nonce: nonce.try_into().ok()?,
            sealed: sealed.try_into().ok()?,
        })
    }

    /// The token id (its nonce).
    #[must_use]
    pub const fn id(&self) -> [u8; NONCE_LEN] {
        self.nonce
    }

    fn aad(&self) -> [u8; AAD_CONTEXT.len() + 1 + 24] {
        let mut a = [0u8; AAD_CONTEXT.len() + 1 + 24];
        let (ctx, rest) = a.split_at_mut(AAD_CONTEXT.len());
        ctx.copy_from_slice(AAD_CONTEXT);
        rest[0] = TOKEN_VERSION;
        rest[1..9].copy_from_slice(&self.protocol_id.to_le_bytes());
        rest[9..17].copy_from_slice(&self.create_unix.to_le_bytes());
        rest[17..25].copy_from_slice(&self.expire_unix.to_le_bytes());
        a
    }

    /// Opens the private part under `key`: the claims and the token's connection keys.
    pub fn open(&self, key: &TokenKey) -> Result<(TokenClaims, ConnKeys), TokenError> {
        let (ct, tag) = self.sealed.split_at(PRIVATE_LEN);
        let mut plain = [0u8; PRIVATE_LEN];
        plain.copy_from_slice(ct);
        let tag = Tag::try_from(tag).map_err(|_| TokenError::Forged)?;
        key.seal_cipher()
            .decrypt_inout_detached(
                &XNonce::from(self.nonce),
                &self.aad(),
                plain.as_mut_slice().into(),
                &tag,
            )
            .map_err(|_| TokenError::Forged)?;
        let slot = plain[0];
        let kind = TokenKind::from_byte(plain[1]).ok_or(TokenError::Malformed {
            what: "token kind",
            at: 1,
        })?;
        let name_len = usize::from(plain[2]);
        if name_len > MAX_MATCH_NAME {
            return Err(TokenError::Malformed {
                what: "match name length",
                at: 2,
            });
        }
        let name_field = &plain[NAME_AT..NAME_AT + MAX_MATCH_NAME];
        if name_field[name_len..].iter().any(|&b| b != 0) {
            return Err(TokenError::Malformed {
                what: "match name padding",
                at: NAME_AT + name_len,
            });
        }
        let match_name = std::str::from_utf8(&name_field[..name_len])
            .map_err(|_| TokenError::Malformed {
                what: "match name (not UTF-8)",
                at: NAME_AT,
            })?
            .to_owned();
        let mut instance = MatchInstance::UNBOUND;
        instance.0.copy_from_slice(&plain[INSTANCE_AT..KEYS_AT]);
        let mut c2s = [0u8; KEY_LEN];
        let mut s2c = [0u8; KEY_LEN];
        c2s.copy_from_slice(&plain[KEYS_AT..KEYS_AT + KEY_LEN]);
        s2c.copy_from_slice(&plain[KEYS_AT + KEY_LEN..]);
        let claims = TokenClaims {
            protocol_id: self.protocol_id,
            match_name,
            slot,
            kind,
            instance,
            create_unix: self.create_unix,
            expire_unix: self.expire_unix,
        };
        Ok((claims, ConnKeys { c2s, s2c }))
    }
}

/// What the client receives from the matchmaker: its keys, the expiry, where to
/// connect and the sealed part it forwards to the relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectToken {
    /// The part only the relay can open (also carries protocol id and times in clear).
    pub private: SealedToken,
    /// The connection keys (also inside the sealed part); keep them secret.
    pub keys: ConnKeys,
    /// Relay addresses to try, in order.
    pub servers: Vec<SocketAddr>,
}

/// Issues a token for `claims`, listing `servers`, sealed under `key`. The nonce and
/// connection keys are derived from `entropy` and the claims under a subkey of
/// `key`: pass 32 fresh random bytes per token.
pub fn issue_token(
    key: &TokenKey,
    claims: &TokenClaims,
    servers: &[SocketAddr],
    entropy: &[u8; 32],
) -> Result<ConnectToken, TokenError> {
    let name = claims.match_name.as_bytes();
    if name.len() > MAX_MATCH_NAME {
        return Err(TokenError::MatchNameTooLong { len: name.len() });
    }
    if servers.len() > MAX_SERVERS {
        return Err(TokenError::TooManyServers {
            count: servers.len(),
        });
    }
    if claims.expire_unix <= claims.create_unix {
        return Err(TokenError::BadLifetime {
            create_unix: claims.create_unix,
            expire_unix: claims.expire_unix,
        });
    }
    let mut plain = [0u8; PRIVATE_LEN];
    plain[0] = claims.slot;
    plain[1] = claims.kind.to_byte();
    plain[2] = name.len() as u8; // checked against MAX_MATCH_NAME (< 256) above
    plain[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
    plain[INSTANCE_AT..KEYS_AT].copy_from_slice(&claims.instance.0);

    let mut h = blake3::Hasher::new_keyed(&blake3::derive_key(ISSUE_KEY_CONTEXT, &key.0));
    h.update(entropy);
    h.update(&claims.protocol_id.to_le_bytes());
    h.update(&claims.create_unix.to_le_bytes());
    h.update(&claims.expire_unix.to_le_bytes());
    h.update(&plain[..KEYS_AT]);
    let mut material = [0u8; NONCE_LEN + 2 * KEY_LEN];
    h.finalize_xof().fill(&mut material);
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&material[..NONCE_LEN]);
    let mut keys = ConnKeys {
        c2s: [0; KEY_LEN],
        s2c: [0; KEY_LEN],
    };
    keys.c2s
        .copy_from_slice(&material[NONCE_LEN..NONCE_LEN + KEY_LEN]);
    keys.s2c.copy_from_slice(&material[NONCE_LEN + KEY_LEN..]);
    plain[KEYS_AT..KEYS_AT + KEY_LEN].copy_from_slice(&keys.c2s);
    plain[KEYS_AT + KEY_LEN..].copy_from_slice(&keys.s2c);

    let mut private = SealedToken {
        protocol_id: claims.protocol_id,
        create_unix: claims.create_unix,
        expire_unix: claims.expire_unix,
        nonce,
        sealed: [0; SEALED_LEN],
    };
    let tag = key
        .seal_cipher()
        .encrypt_inout_detached(
            &XNonce::from(nonce),
            &private.aad(),
            plain.as_mut_slice().into(),
        )
        // A 147-byte message is far below the cipher's length limit.
        .map_err(|_| TokenError::Forged)?;
    private.sealed[..PRIVATE_LEN].copy_from_slice(&plain);
    private.sealed[PRIVATE_LEN..].copy_from_slice(&tag);
    Ok(ConnectToken {
        private,
        keys,
        servers: servers.to_vec(),
    })
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], TokenError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(TokenError::Malformed { what, at: self.pos })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], TokenError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, TokenError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

impl ConnectToken {
    /// Protocol id the token is for.
    #[must_use]
    pub const fn protocol_id(&self) -> u64 {
        self.private.protocol_id
    }

    /// First Unix second at which the relay refuses the token.
    #[must_use]
    pub const fn expire_unix(&self) -> u64 {
        self.private.expire_unix
    }

    /// Appends the public token's bytes: magic `LSJT`, version, protocol id, create,
    /// expire, nonce, sealed part, c2s key, s2c key, server count, servers
    /// (family 4 or 6, address, port), all little-endian.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.push(TOKEN_VERSION);
        out.extend_from_slice(&self.private.protocol_id.to_le_bytes());
        self.private.encode_body(out);
        out.extend_from_slice(&self.keys.c2s);
        out.extend_from_slice(&self.keys.s2c);
        // At most MAX_SERVERS when issued; a hand-built token with more is cut, not wrapped.
        let n = self.servers.len().min(MAX_SERVERS);
        out.push(n as u8);
        for s in &self.servers[..n] {
            match s.ip() {
                IpAddr::V4(ip) => {
                    out.push(4);
                    out.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    out.push(6);
                    out.extend_from_slice(&ip.octets());
                }
            }
            out.extend_from_slice(&s.port().to_le_bytes());
        }
    }

    /// The public token's bytes.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// Reads bytes written by [`ConnectToken::encode`]; never panics.
    pub fn decode(bytes: &[u8]) -> Result<Self, TokenError> {
        let mut r = Cursor { bytes, pos: 0 };
        if r.take(4, "magic")? != MAGIC {
            return Err(TokenError::Malformed {
                what: "magic",
                at: 0,
            });
        }
        let version = r.array::<1>("version")?[0];
        if version != TOKEN_VERSION {
            return Err(TokenError::Malformed {
                what: "version",
                at: 4,
            });
        }
        let protocol_id = r.u64("protocol id")?;
        let body = r.take(SEALED_TOKEN_WIRE_LEN, "sealed token")?;
        let private = SealedToken::decode_body(protocol_id, body).ok_or(TokenError::Malformed {
            what: "sealed token",
            at: 13,
        })?;
        let keys = ConnKeys {
            c2s: r.array("c2s key")?,
            s2c: r.array("s2c key")?,
        };
        let count_at = r.pos;
        let count = usize::from(r.array::<1>("server count")?[0]);
        if count > MAX_SERVERS {
            return Err(TokenError::Malformed {
                what: "server count",
                at: count_at,
            });
        }
        let mut servers = Vec::with_capacity(count);
        for _ in 0..count {
            let fam_at = r.pos;
            let ip = match r.array::<1>("address family")?[0] {
                4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>("IPv4 address")?)),
                6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>("IPv6 address")?)),
                _ => {
                    return Err(TokenError::Malformed {
                        what: "address family",
                        at: fam_at,
                    });
                }
            };
            let port = u16::from_le_bytes(r.array("port")?);
            servers.push(SocketAddr::new(ip, port));
        }
        if r.pos != bytes.len() {
            return Err(TokenError::Malformed {
                what: "trailing bytes",
                at: r.pos,
            });
        }
        Ok(Self {
            private,
            keys,
            servers,
        })
    }

    /// The public token as lower-case hex text (for a command line or a web page).
    #[must_use]
    pub fn to_hex(&self) -> String {
        to_hex(&self.to_bytes())
    }

    /// Parses [`ConnectToken::to_hex`] output (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<Self, TokenError> {
        Self::decode(&from_hex(text.trim())?)
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0F)]));
    }
    s
}

fn from_hex(text: &str) -> Result<Vec<u8>, TokenError> {
    fn nibble(c: u8) -> Result<u8, TokenError> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(TokenError::Hex("not a hex digit")),
        }
    }
    let b = text.as_bytes();
    if b.len() % 2 != 0 {
        return Err(TokenError::Hex("odd number of hex digits"));
    }
    b.chunks_exact(2)
        .map(|p| Ok(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

pub(crate) mod ledger;
pub use ledger::{MAX_ADMITTED_COOKIES, MAX_TRACKED_TOKENS};

#[cfg(test)]
mod tests;
