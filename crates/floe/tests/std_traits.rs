//! The std traits and whole-map operations every map and set has, checked against std's
//! collections: `FromIterator`, `Extend`, owning `IntoIterator`, `drain`, `retain` (also while
//! the map changes under it), `Debug`, `Default`, and `serde` (with `--features serde`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use floe::{FlatMap, FlatSet, Map, Set};
use proptest::prelude::*;

fn sorted<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Collecting, extending, retaining, draining and consuming give what std's map gives, on
    /// maps that start tiny and grow.
    #[test]
    fn whole_map_operations_agree_with_std(
        pairs in prop::collection::vec((0u16..400, any::<u32>()), 0..600),
        more in prop::collection::vec((0u16..400, any::<u32>()), 0..200),
        modulus in 1u32..5,
    ) {
        let mut model: HashMap<u16, u32> = pairs.iter().copied().collect();
        let mut flat: FlatMap<u16, u32> = pairs.iter().copied().collect();
        let mut any: Map<String, u32> = pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        prop_assert_eq!(flat.len(), model.len());
        prop_assert_eq!(any.len(), model.len());

        model.extend(more.iter().copied());
        flat.extend(more.iter().copied());
        any.extend(more.iter().map(|&(k, v)| (k.to_string(), v)));
        for (k, v) in &model {
            prop_assert_eq!(flat.get(k), Some(*v));
            prop_assert_eq!(any.get_cloned(k.to_string().as_str()), Some(*v));
        }

        model.retain(|_, v| *v % modulus == 0);
        flat.retain(|_, v| v % modulus == 0);
        any.pin().retain(|_, v| *v % modulus == 0);
        let expected = sorted(model.iter().map(|(&k, &v)| (k, v)).collect());
        prop_assert_eq!(sorted(flat.iter().collect()), expected.clone());
        let any_pairs = sorted(any.pin().iter().map(|(k, &v)| (k.parse::<u16>().unwrap(), v)).collect());
        prop_assert_eq!(any_pairs, expected.clone());

        prop_assert_eq!(sorted(flat.drain().collect()), expected.clone());
        prop_assert!(flat.is_empty());
        assert!(flat.insert_new(1, 1).is_inserted());
        prop_assert_eq!(flat.into_iter().collect::<Vec<_>>(), vec![(1, 1)]);

        let owned = sorted(any.into_iter().map(|(k, v)| (k.parse::<u16>().unwrap(), v)).collect());
        prop_assert_eq!(owned, expected);
    }

    #[test]
    fn sets_agree_with_std(
        keys in prop::collection::vec(0u32..500, 0..600),
        modulus in 1u32..5,
    ) {
        let mut model: BTreeSet<u32> = keys.iter().copied().collect();
        let flat: FlatSet<u32> = keys.iter().copied().collect();
        let any: Set<u32> = keys.iter().copied().collect();
        prop_assert_eq!(flat.len(), model.len());
        prop_assert_eq!(any.len(), model.len());
        model.retain(|k| k % modulus == 0);
        flat.retain(|k| k % modulus == 0);
        any.retain(|k| k % modulus == 0);
        let expected: Vec<u32> = model.into_iter().collect();
        prop_assert_eq!(sorted(flat.into_iter().collect()), expected.clone());
        prop_assert_eq!(sorted(any.into_iter().collect()), expected);
    }
}

/// `retain` removes a pair only if it is still the pair `keep` judged: a value written after
/// `keep` saw the old one stays (here the writer is `keep` itself, so the race is certain).
#[test]
fn retain_keeps_a_value_written_after_it_was_judged() {
    let flat: FlatMap<u32, u32> = (0..100).map(|k| (k, 0)).collect();
    flat.retain(|k, v| {
        if k % 10 == 0 {
            flat.put(k, v + 1); // changes before the removal
        }
        false
    });
    let mut left: Vec<_> = flat.iter().collect();
    left.sort_unstable();
    assert_eq!(
        left,
        (0..100).step_by(10).map(|k| (k, 1)).collect::<Vec<_>>()
    );

    let any: Map<u32, String> = (0..100).map(|k| (k, String::new())).collect();
    let m = any.pin();
    m.retain(|&k, _| {
        if k % 10 == 0 {
            m.insert(k, "rewritten".to_string());
        }
        false
    });
    let mut left: Vec<_> = m.iter().map(|(&k, v)| (k, v.clone())).collect();
    left.sort_unstable();
    let expect: Vec<_> = (0..100)
        .step_by(10)
        .map(|k| (k, "rewritten".to_string()))
        .collect();
    assert_eq!(left, expect);
}

/// `retain` while another thread grows the map: every key present throughout is judged once
/// (those it rejects are gone, those it keeps stay), and keys the writer adds are untouched
/// unless `retain` judged them.
#[test]
fn retain_judges_every_stable_key_once_while_the_map_grows() {
    let map = Map::<u64, u64>::builder().bins(2).build().unwrap();
    for k in 0..2_000u64 {
        assert!(map.pin().insert_new(k, k).is_inserted());
    }
    let mut judged = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            let m = map.pin();
            for k in 1_000_000..1_040_000u64 {
                assert!(m.insert_new(k, k).is_inserted());
            }
        });
        map.pin().retain(|&k, _| {
            if k < 2_000 {
                judged.push(k);
            }
            k % 2 == 1
        });
    });
    assert_eq!(sorted(judged), (0..2_000).collect::<Vec<_>>());
    let m = map.pin();
    for k in 0..2_000u64 {
        assert_eq!(m.get(&k).is_some(), k % 2 == 1, "key {k}");
    }
    assert_eq!(map.check_invariants(), map.len());
}

#[test]
fn debug_prints_the_contents_as_std_does() {
    let flat: FlatMap<u8, char> = [(1, 'a')].into_iter().collect();
    assert_eq!(format!("{flat:?}"), "{1: 'a'}");
    let any: Map<String, Vec<u8>> = [("k".to_string(), vec![1, 2])].into_iter().collect();
    assert_eq!(format!("{any:?}"), r#"{"k": [1, 2]}"#);
    assert_eq!(format!("{:?}", any.pin()), r#"{"k": [1, 2]}"#);
    let flat_set: FlatSet<i32> = [-3].into_iter().collect();
    assert_eq!(format!("{flat_set:?}"), "{-3}");
    let set: Set<&str> = ["x"].into_iter().collect();
    assert_eq!(format!("{set:?}"), r#"{"x"}"#);
    assert_eq!(format!("{:?}", set.pin()), r#"{"x"}"#);
    let empty = FlatMap::<u64, u64>::default();
    assert_eq!(format!("{empty:?}"), "{}");
    let mut big: Vec<_> = (0..50u8).map(|k| (k, k)).collect();
    let model: BTreeMap<u8, u8> = big.iter().copied().collect();
    let floe: FlatMap<u8, u8> = big.drain(..).collect();
    // Same entries, in the map's own order.
    let printed = format!("{floe:?}");
    assert_eq!(printed.matches(": ").count(), model.len());
}

#[cfg(feature = "serde")]
mod serde_round_trips {
    use super::*;

    #[test]
    fn maps_and_sets_round_trip_through_json() {
        let flat: FlatMap<u64, i32> = (0..300u64).map(|k| (k, -(k as i32))).collect();
        let json = serde_json::to_string(&flat).unwrap();
        let back: FlatMap<u64, i32> = serde_json::from_str(&json).unwrap();
        assert!(back == flat);
        let model: HashMap<u64, i32> = serde_json::from_str(&json).unwrap();
        assert_eq!(model.len(), 300);

        let any: Map<String, Vec<u8>> = (0..300u32)
            .map(|k| (format!("key{k}"), k.to_le_bytes().to_vec()))
            .collect();
        let json = serde_json::to_string(&any).unwrap();
        let back: Map<String, Vec<u8>> = serde_json::from_str(&json).unwrap();
        assert!(back == any);

        let flat_set: FlatSet<u16> = (0..100).collect();
        let back: FlatSet<u16> =
            serde_json::from_str(&serde_json::to_string(&flat_set).unwrap()).unwrap();
        assert_eq!(sorted(back.iter().collect()), (0..100).collect::<Vec<_>>());
        let set: Set<String> = ["a", "b"].map(String::from).into_iter().collect();
        let back: Set<String> =
            serde_json::from_str(&serde_json::to_string(&set).unwrap()).unwrap();
        assert!(back.contains("a") && back.contains("b") && back.len() == 2);
    }

    #[test]
    fn bad_input_is_an_error_and_duplicates_keep_the_last() {
        assert!(serde_json::from_str::<FlatMap<u64, u64>>(r#"{"1": 2, "x": 3}"#).is_err());
        assert!(serde_json::from_str::<FlatMap<u64, u64>>(r#"{"1": 2"#).is_err());
        assert!(serde_json::from_str::<FlatMap<u8, u8>>(r#"{"1": 300}"#).is_err());
        assert!(serde_json::from_str::<Map<String, u8>>("[1, 2]").is_err());
        assert!(serde_json::from_str::<Set<String>>(r#"{"a": 1}"#).is_err());
        let last: Map<String, u8> = serde_json::from_str(r#"{"a": 1, "a": 2}"#).unwrap();
        assert_eq!(last.get_cloned("a"), Some(2));
    }
}
