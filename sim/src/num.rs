//! Fixed-point toolkit: the one scalar type [`Fx`], the 2-D [`Vec2`], and
//! integer square root / distance. No floats anywhere: every constant is
//! built from bits or integer ratios.

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Neg, Sub, SubAssign};

/// The simulation's scalar: a signed 64-bit fixed-point number with 16
/// fractional bits, measured in map tiles.
///
/// Why `I48F16`: 1/65536 of a tile is far finer than any speed or radius the
/// game uses, and the 47-bit integer part means a *squared* distance across
/// even a 1024-tile map (about 2^21 tiles², i.e. 2^53 in raw bits) still fits
/// the raw `i64`. Overflow is therefore impossible by construction, which
/// matters because the `fixed` crate panics on overflow only when debug
/// assertions are on: a type with headroom keeps debug and release equal.
pub type Fx = fixed::types::I48F16;

/// Number of fractional bits of [`Fx`].
pub const FRAC_BITS: u32 = 16;

/// `1.0` in raw [`Fx`] bits.
pub const ONE_BITS: i64 = 1 << FRAC_BITS;

/// Builds `num / den` as an [`Fx`] using integer arithmetic only (rounds toward zero).
#[must_use]
pub const fn fx_ratio(num: i64, den: i64) -> Fx {
    Fx::from_bits(num * ONE_BITS / den)
}

/// Builds an integer-valued [`Fx`].
#[must_use]
pub const fn fx_int(n: i64) -> Fx {
    Fx::from_bits(n * ONE_BITS)
}

/// Integer square root: the largest `r` with `r * r <= n`.
///
/// Starts from the floating-point root and corrects it in integers, so the
/// result is exact on every platform whatever the estimate (IEEE 754 square
/// roots are correctly rounded anyway); a few times faster than Newton's
/// iteration, which divides five or six times.
#[must_use]
pub fn isqrt(n: u64) -> u64 {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let mut r = ((n as f64).sqrt() as u64).min(u64::from(u32::MAX));
    // The estimate is within one of the root; these loops make it exact.
    while r * r > n {
        r -= 1;
    }
    while r < u64::from(u32::MAX) && (r + 1) * (r + 1) <= n {
        r += 1;
    }
    r
}

/// `a * b / c`, rounded toward zero, in 64-bit integers when the product
/// fits (nearly always for map-sized values) and 128-bit otherwise: the same
/// result either way, without the 128-bit division's cost. `None` when the
/// quotient does not fit an `i64`; `c` must not be zero.
pub(crate) fn mul_div(a: i64, b: i64, c: i64) -> Option<i64> {
    match a.checked_mul(b) {
        Some(p) => p.checked_div(c),
        None => i64::try_from(i128::from(a) * i128::from(b) / i128::from(c)).ok(),
    }
}

/// A 2-D vector of [`Fx`], in tiles.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Vec2 {
    /// Horizontal coordinate (tiles, grows east).
    pub x: Fx,
    /// Vertical coordinate (tiles, grows south).
    pub y: Fx,
}

impl Vec2 {
    /// The zero vector.
    pub const ZERO: Self = Self {
        x: Fx::ZERO,
        y: Fx::ZERO,
    };

    /// Builds a vector from two scalars.
    #[must_use]
    pub const fn new(x: Fx, y: Fx) -> Self {
        Self { x, y }
    }

    /// Builds a vector from raw bits.
    #[must_use]
    pub const fn from_bits(x: i64, y: i64) -> Self {
        Self {
            x: Fx::from_bits(x),
            y: Fx::from_bits(y),
        }
    }

    /// The centre of tile `(tx, ty)`.
    #[must_use]
    pub const fn tile_center(tx: u16, ty: u16) -> Self {
        Self::from_bits(
            (tx as i64) * ONE_BITS + ONE_BITS / 2,
            (ty as i64) * ONE_BITS + ONE_BITS / 2,
        )
    }

    /// Squared length in raw units (2^-32 tiles²). Never overflows for map-sized vectors.
    #[must_use]
    pub fn length_sq_bits(self) -> i64 {
        let (x, y) = (self.x.to_bits(), self.y.to_bits());
        // Under 2^31 raw on both axes (anything map-sized), each square is
        // under 2^62 and their sum under 2^63: plain arithmetic is exact and
        // equals the saturating form, at a third of its cost (targeting
        // measures a distance per candidate).
        if (x.unsigned_abs() | y.unsigned_abs()) < 1 << 31 {
            x * x + y * y
        } else {
            x.saturating_mul(x).saturating_add(y.saturating_mul(y))
        }
    }

    /// Length, rounded down to a raw bit.
    #[must_use]
    pub fn length(self) -> Fx {
        let sq = u64::try_from(self.length_sq_bits()).unwrap_or(0);
        Fx::from_bits(i64::try_from(isqrt(sq)).unwrap_or(i64::MAX))
    }

    /// Squared distance to `other` in raw units.
    #[must_use]
    pub fn dist_sq_bits(self, other: Self) -> i64 {
        (other - self).length_sq_bits()
    }

    /// Distance to `other`.
    #[must_use]
    pub fn distance(self, other: Self) -> Fx {
        (other - self).length()
    }

    /// This vector rescaled to length `len` (zero stays zero).
    #[must_use]
    pub fn with_length(self, len: Fx) -> Self {
        let cur = self.length().to_bits();
        if cur == 0 {
            return Self::ZERO;
        }
        let l = len.to_bits();
        Self::from_bits(
            mul_div(self.x.to_bits(), l, cur).unwrap_or(0),
            mul_div(self.y.to_bits(), l, cur).unwrap_or(0),
        )
    }

    /// Moves towards `target` by at most `step`; returns the new point.
    #[must_use]
    pub fn step_towards(self, target: Self, step: Fx) -> Self {
        let d = target - self;
        if d.length_sq_bits() <= step.to_bits().saturating_mul(step.to_bits()) {
            return target;
        }
        self + d.with_length(step)
    }

    /// Dot product `self · other`, rounded down to a raw bit (saturating).
    ///
    /// For projections, facing tests and collision responses; computed in
    /// 128-bit integers so it cannot overflow for any two vectors.
    #[must_use]
    pub fn dot(self, other: Self) -> Fx {
        let p = i128::from(self.x.to_bits()) * i128::from(other.x.to_bits())
            + i128::from(self.y.to_bits()) * i128::from(other.y.to_bits());
        Fx::from_bits(saturate(p >> FRAC_BITS))
    }

    /// This vector multiplied by the scalar `k`, rounded down to a raw bit (saturating).
    #[must_use]
    pub fn scale(self, k: Fx) -> Self {
        let k = i128::from(k.to_bits());
        Self::from_bits(
            saturate((i128::from(self.x.to_bits()) * k) >> FRAC_BITS),
            saturate((i128::from(self.y.to_bits()) * k) >> FRAC_BITS),
        )
    }

    /// This vector multiplied by `num / den` in integers (rounds toward zero;
    /// `den == 0` gives zero). For drag, braking and other per-tick ratios.
    #[must_use]
    pub fn mul_ratio(self, num: i64, den: i64) -> Self {
        if den == 0 {
            return Self::ZERO;
        }
        let ratio = |v: i64| {
            mul_div(v, num, den).unwrap_or_else(|| {
                // Only an overflowing quotient gets here: saturate it.
                saturate(i128::from(v) * i128::from(num) / i128::from(den))
            })
        };
        Self::from_bits(ratio(self.x.to_bits()), ratio(self.y.to_bits()))
    }

    /// The tile this point lies in (coordinates clamp at zero).
    #[must_use]
    pub fn tile(self) -> (u16, u16) {
        let tx = (self.x.to_bits() >> FRAC_BITS).clamp(0, i64::from(u16::MAX));
        let ty = (self.y.to_bits() >> FRAC_BITS).clamp(0, i64::from(u16::MAX));
        (
            u16::try_from(tx).unwrap_or(0),
            u16::try_from(ty).unwrap_or(0),
        )
    }
}

/// Clamps a 128-bit intermediate into raw `Fx` bits.
fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl Add for Vec2 {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self::new(self.x + o.x, self.y + o.y)
    }
}

impl Sub for Vec2 {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self::new(self.x - o.x, self.y - o.y)
    }
}

impl AddAssign for Vec2 {
    fn add_assign(&mut self, o: Self) {
        *self = *self + o;
    }
}

impl SubAssign for Vec2 {
    fn sub_assign(&mut self, o: Self) {
        *self = *self - o;
    }
}

impl Neg for Vec2 {
    type Output = Self;
    fn neg(self) -> Self {
        Self::new(-self.x, -self.y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isqrt_is_floor_sqrt() {
        for n in 0..10_000u64 {
            let r = isqrt(n);
            assert!(r * r <= n && (r + 1) * (r + 1) > n, "n={n} r={r}");
        }
        for n in [u64::MAX, u64::MAX - 1, 1 << 62, (1 << 53) + 12345] {
            let r = u128::from(isqrt(n));
            assert!(r * r <= u128::from(n) && (r + 1) * (r + 1) > u128::from(n));
        }
    }

    #[test]
    fn distance_of_3_4_5() {
        let a = Vec2::new(fx_int(1), fx_int(1));
        let b = Vec2::new(fx_int(4), fx_int(5));
        assert_eq!(a.distance(b), fx_int(5));
        assert_eq!(fx_ratio(1, 2).to_bits(), ONE_BITS / 2);
    }

    #[test]
    fn dot_scale_and_ratio() {
        let a = Vec2::new(fx_int(3), fx_int(-4));
        let b = Vec2::new(fx_ratio(1, 2), fx_int(2));
        assert_eq!(a.dot(b), fx_ratio(-13, 2));
        assert_eq!(
            a.scale(fx_ratio(1, 2)),
            Vec2::new(fx_ratio(3, 2), fx_int(-2))
        );
        assert_eq!(a.mul_ratio(1, 4), Vec2::new(fx_ratio(3, 4), fx_int(-1)));
        assert_eq!(a.mul_ratio(1, 0), Vec2::ZERO);
        let huge = Vec2::from_bits(i64::MAX, i64::MAX);
        assert_eq!(huge.dot(huge).to_bits(), i64::MAX);
    }

    /// The fast path and the saturating form agree on both sides of its
    /// bound, for either sign, up to the largest vectors.
    #[test]
    fn length_sq_is_the_saturating_sum_of_squares() {
        let edge = 1i64 << 31;
        let values = [
            0,
            1,
            -1,
            12_345,
            edge - 1,
            -(edge - 1),
            edge,
            -edge,
            edge + 1,
        ];
        let extremes = [i64::MAX, i64::MIN + 1, i64::MIN, 3 << 40];
        for &x in values.iter().chain(&extremes) {
            for &y in values.iter().chain(&extremes) {
                let want = x.saturating_mul(x).saturating_add(y.saturating_mul(y));
                assert_eq!(Vec2::from_bits(x, y).length_sq_bits(), want, "{x}, {y}");
            }
        }
    }

    #[test]
    fn step_towards_stops_at_target() {
        let a = Vec2::ZERO;
        let b = Vec2::new(fx_int(3), fx_int(4));
        let s = a.step_towards(b, fx_int(1));
        // Rounded towards zero, within a couple of raw bits of one tile.
        assert!((s.length() - fx_int(1)).abs() <= Fx::from_bits(2));
        assert!(s.length() <= fx_int(1));
        assert_eq!(a.step_towards(b, fx_int(10)), b);
        assert_eq!(Vec2::tile_center(2, 3).tile(), (2, 3));
    }
}
