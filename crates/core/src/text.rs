//! Comparing text where it is compared at every sample.

/// Whether `a` and `b` hold the same bytes: `a == b`, except that two empty texts are
/// never handed to the C library's `memcmp`. An empty `String` or `Vec` points at a
/// dangling address, and glibc's AVX-512 `memcmp` (the one it picks on CPUs that have
/// AVX-512) reads its operands with a masked load even when told to compare nothing; at
/// an unmapped address that load takes a fault-suppression assist. On the benchmark
/// machine (AMD EPYC, glibc 2.36) a zero-length compare of two dangling pointers took
/// 77–85 ns, a compare of two real ones 2–3 ns (bench/memcmp-empty.sh), and the
/// comparisons of empty names and reasons done once a GPU a step were about a tenth of a
/// narrow log's replay (BENCHMARKS.md, replay).
#[inline]
pub fn same(a: impl AsRef<[u8]>, b: impl AsRef<[u8]>) -> bool {
    let (a, b) = (a.as_ref(), b.as_ref());
    a.len() == b.len() && (a.is_empty() || a == b)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::same;

    #[test]
    fn empty_texts_are_the_same_and_differ_from_any_other() {
        assert!(same(String::new(), Vec::new()));
        assert!(same(b"", &b"abc"[3..]));
        assert!(!same(b"", b"a"));
        assert!(!same(b"a", b""));
    }

    proptest! {
        #[test]
        fn it_is_equality(a in proptest::collection::vec(0u8..4, 0..12),
                          b in proptest::collection::vec(0u8..4, 0..12)) {
            prop_assert_eq!(same(&a, &b), a == b);
            prop_assert!(same(&a, a.clone()));
        }
    }
}
