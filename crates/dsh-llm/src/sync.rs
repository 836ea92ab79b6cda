//! Locks that survive a panicking holder.
//!
//! dsh never panics on input (docs/ARCHITECTURE.md, "Invariants"), but a panic in a test helper,
//! an extension or a dependency can still poison a `std::sync::Mutex`. The data behind every lock
//! in dsh stays consistent between statements (each critical section is a plain read or a
//! single update), so a poisoned lock is taken over instead of turning one panic into a cascade.
//! This is the one place that decision lives; call [`LockExt::lock_or_recover`] instead of
//! `.lock().unwrap_or_else(|p| p.into_inner())`.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Taking a lock even when an earlier holder panicked.
pub trait LockExt<T: ?Sized> {
    /// Locks the mutex; a poisoned lock is recovered and its data returned as it was left.
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;

    /// Consumes the mutex and returns its data, poisoned or not.
    fn into_inner_or_recover(self) -> T
    where
        Self: Sized,
        T: Sized;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn into_inner_or_recover(self) -> T
    where
        T: Sized,
    {
        self.into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The same for reader-writer locks.
pub trait RwLockExt<T: ?Sized> {
    /// Takes a read lock, recovering from poison.
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T>;
    /// Takes a write lock, recovering from poison.
    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T> {
        self.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_mutex_is_recovered_with_its_data() {
        let shared = Arc::new(Mutex::new(vec![1]));
        let clone = Arc::clone(&shared);
        let joined = std::thread::spawn(move || {
            let mut guard = clone.lock().unwrap();
            guard.push(2);
            panic!("poison the lock on purpose");
        })
        .join();
        assert!(joined.is_err());
        assert!(shared.is_poisoned());
        let mut guard = shared.lock_or_recover();
        assert_eq!(*guard, vec![1, 2]);
        guard.push(3);
        drop(guard);
        assert_eq!(*shared.lock_or_recover(), vec![1, 2, 3]);
    }

    #[test]
    fn a_poisoned_rwlock_is_recovered_for_reads_and_writes() {
        let shared = Arc::new(RwLock::new(5));
        let clone = Arc::clone(&shared);
        let joined = std::thread::spawn(move || {
            let mut guard = clone.write().unwrap();
            *guard = 6;
            panic!("poison the lock on purpose");
        })
        .join();
        assert!(joined.is_err());
        assert!(shared.is_poisoned());
        assert_eq!(*shared.read_or_recover(), 6);
        *shared.write_or_recover() = 7;
        assert_eq!(*shared.read_or_recover(), 7);
    }
}
