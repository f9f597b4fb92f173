use super::*;

/// The values the helpers must read as the standard library's `fract` and `round` do:
/// halves, values just either side of them, the ends of the believable range and past it.
fn values() -> Vec<f64> {
    let mut out = vec![
        0.0,
        -0.0,
        0.5,
        1.5,
        2.5,
        0.49999999999999994,
        0.5000000000000001,
        1.0 - f64::EPSILON / 2.0,
        4_503_599_627_370_495.5,
        4_503_599_627_370_496.0,
        LARGEST_COUNT,
        LARGEST_COUNT - 1.0,
        LARGEST_COUNT + 2.0,
        -0.4,
        -0.5,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        4_294_967_295.4,
        4_294_967_295.5,
        4_294_967_296.0,
    ];
    let mut x = 0.001_f64;
    while x < 1e17 {
        out.extend([x, x + 0.5, x.floor() + 0.5, x * 0.999_999_9]);
        x *= 1.37;
    }
    out
}

#[test]
fn whole_numbers_and_rounding_are_those_of_fract_and_round() {
    for v in values() {
        let whole_before =
            ((0.0..=LARGEST_COUNT).contains(&v) && v.fract() == 0.0).then_some(v as u64);
        assert_eq!(whole(v), whole_before, "whole({v:?})");
        let bytes_before = (0.0..=LARGEST_COUNT).contains(&v).then(|| v.round() as u64);
        assert_eq!(bytes(v), bytes_before, "bytes({v:?})");
        assert_eq!(small_rounded(v), small(v.round()), "small_rounded({v:?})");
    }
}
