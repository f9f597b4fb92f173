//! `--trace NODE:GPU`: what is read, and that no text makes the parser panic.

use proptest::prelude::*;

use super::parse_traced;

#[test]
fn a_node_and_a_gpu_are_read_as_the_tables_list_them() {
    assert_eq!(parse_traced("3:1"), Ok((3, 1)));
    assert_eq!(parse_traced(" 24 : 0 "), Ok((24, 0)));
    for bad in [
        "", "3", "3:", ":1", "a:1", "3:x", "3:-1", "-3:1", "3:1:2", "1.5:0",
    ] {
        let error = parse_traced(bad).expect_err(bad);
        assert!(error.contains("NODE:GPU"), "{bad}: {error}");
    }
    let zero = parse_traced("0:1").expect_err("node 0");
    assert!(zero.contains("from 1"), "{zero}");
}

proptest! {
    #[test]
    fn any_text_is_read_or_refused_by_name(text in ".{0,24}") {
        match parse_traced(&text) {
            Ok((node, _)) => prop_assert!(node >= 1),
            Err(error) => {
                let quoted = format!("{:?}", text);
                prop_assert!(error.contains(&quoted), "{}", error);
            }
        }
    }

    #[test]
    fn every_node_and_gpu_reads_back(node in 1usize..100_000, gpu in 0u32..1_000) {
        prop_assert_eq!(parse_traced(&format!("{node}:{gpu}")), Ok((node, gpu)));
    }
}
