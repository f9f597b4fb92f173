//! Unit tests of `sync`: a poisoned lock still gives its data.

use super::*;

#[test]
fn a_lock_poisoned_by_a_panic_still_gives_its_data() {
    let mutex = Mutex::new(1);
    let rw = RwLock::new(1);
    let _ = std::panic::catch_unwind(|| {
        let _guard = mutex.lock();
        let _write = rw.write();
        panic!("poison both");
    });
    assert!(mutex.is_poisoned() && rw.is_poisoned());
    *lock(&mutex) += 1;
    *write(&rw) += 1;
    assert_eq!((*lock(&mutex), *read(&rw)), (2, 2));
}
