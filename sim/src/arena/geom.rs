//! Headings and the small geometry the arena needs (unit vectors from a
//! table, closest approach of a moving point), all in fixed point.

use crate::num::{Fx, ONE_BITS, Vec2};

/// Number of distinct headings in a full turn; heading 0 points east
/// (+x), heading `HEADINGS / 4` south (+y).
pub const HEADINGS: u8 = 128;

/// `sin(k·π/64)` for `k` in `0..=32` as raw [`Fx`] bits (a quarter turn),
/// rounded to the nearest bit: the only trigonometry the game uses.
const SIN_BITS: [i64; 33] = [
    0, 3216, 6424, 9616, 12785, 15924, 19024, 22078, 25080, 28020, 30893, 33692, 36410, 39040,
    41576, 44011, 46341, 48559, 50660, 52639, 54491, 56212, 57798, 59244, 60547, 61705, 62714,
    63572, 64277, 64827, 65220, 65457, 65536,
];

/// The unit vector of heading `h` (taken modulo [`HEADINGS`]).
#[must_use]
pub fn heading_vector(h: u8) -> Vec2 {
    let h = h % HEADINGS;
    let quarter = HEADINGS / 4;
    let k = usize::from(h % quarter);
    let q = usize::from(quarter);
    let (sin, cos) = match h / quarter {
        0 => (SIN_BITS[k], SIN_BITS[q - k]),
        1 => (SIN_BITS[q - k], -SIN_BITS[k]),
        2 => (-SIN_BITS[k], -SIN_BITS[q - k]),
        _ => (-SIN_BITS[q - k], SIN_BITS[k]),
    };
    Vec2::from_bits(cos, sin)
}

/// The heading closest to the direction of `v` (ties to the lowest
/// heading; the zero vector gives heading 0).
#[must_use]
pub fn heading_towards(v: Vec2) -> u8 {
    if v == Vec2::ZERO {
        return 0;
    }
    // Normalise first so the dot products stay small and comparable.
    let v = v.with_length(crate::num::fx_int(1));
    let mut best = (Fx::MIN, 0u8);
    for h in 0..HEADINGS {
        let d = v.dot(heading_vector(h));
        if d > best.0 {
            best = (d, h);
        }
    }
    best.1
}

/// The signed shortest turn from heading `from` to heading `to`, in
/// `-HEADINGS/2 .. HEADINGS/2`.
#[must_use]
pub fn heading_delta(from: u8, to: u8) -> i16 {
    let n = i16::from(HEADINGS);
    let d = (i16::from(to % HEADINGS) - i16::from(from % HEADINGS)).rem_euclid(n);
    if d >= n / 2 { d - n } else { d }
}

/// Where along the segment `a → a + d` a point passes closest to `c`:
/// the fraction `t` in `[0, 1]` (raw bits, `ONE_BITS` = 1) and the squared
/// distance there in raw units. Used for projectile hits, so a fast shot
/// cannot tunnel through a ship between two ticks.
#[must_use]
pub(crate) fn closest_approach(a: Vec2, d: Vec2, c: Vec2) -> (i64, i64) {
    let dd = i128::from(d.length_sq_bits());
    let t = if dd == 0 {
        0
    } else {
        let ac = c - a;
        let num = i128::from(ac.x.to_bits()) * i128::from(d.x.to_bits())
            + i128::from(ac.y.to_bits()) * i128::from(d.y.to_bits());
        let t = (num * i128::from(ONE_BITS) / dd).clamp(0, i128::from(ONE_BITS));
        i64::try_from(t).unwrap_or(0)
    };
    let p = a + d.mul_ratio(t, ONE_BITS);
    (t, p.dist_sq_bits(c))
}

/// `r²` in the raw units of [`Vec2::length_sq_bits`].
#[must_use]
pub(crate) fn sq_bits(r: Fx) -> i64 {
    r.to_bits().saturating_mul(r.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::{fx_int, fx_ratio};

    #[test]
    fn headings_are_unit_vectors_going_round_clockwise() {
        assert_eq!(heading_vector(0), Vec2::new(fx_int(1), Fx::ZERO));
        assert_eq!(heading_vector(32), Vec2::new(Fx::ZERO, fx_int(1)));
        assert_eq!(heading_vector(64), Vec2::new(fx_int(-1), Fx::ZERO));
        assert_eq!(heading_vector(96), Vec2::new(Fx::ZERO, fx_int(-1)));
        for h in 0..HEADINGS {
            let len = heading_vector(h).length();
            assert!((len - fx_int(1)).abs() <= Fx::from_bits(2), "h={h}");
            assert_eq!(heading_towards(heading_vector(h)), h);
            assert_eq!(heading_towards(heading_vector(h).scale(fx_int(30))), h);
        }
    }

    #[test]
    fn deltas_take_the_short_way() {
        assert_eq!(heading_delta(0, 10), 10);
        assert_eq!(heading_delta(10, 0), -10);
        assert_eq!(heading_delta(120, 4), 12);
        assert_eq!(heading_delta(4, 120), -12);
        assert_eq!(heading_delta(0, 64), -64);
    }

    #[test]
    fn closest_approach_clamps_to_the_segment() {
        let a = Vec2::ZERO;
        let d = Vec2::new(fx_int(2), Fx::ZERO);
        let (t, dsq) = closest_approach(a, d, Vec2::new(fx_int(1), fx_int(1)));
        assert_eq!(t, ONE_BITS / 2);
        assert_eq!(dsq, sq_bits(fx_int(1)));
        let (t, _) = closest_approach(a, d, Vec2::new(fx_int(5), Fx::ZERO));
        assert_eq!(t, ONE_BITS);
        let (t, dsq) = closest_approach(a, Vec2::ZERO, Vec2::new(fx_ratio(3, 4), Fx::ZERO));
        assert_eq!((t, dsq), (0, sq_bits(fx_ratio(3, 4))));
    }
}
