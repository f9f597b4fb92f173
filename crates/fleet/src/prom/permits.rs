//! A counting semaphore: the bound on queries in flight.

pub(super) struct Permits {
    pub(super) free: std::sync::Mutex<usize>,
    returned: std::sync::Condvar,
}

pub(super) struct Permit<'a>(&'a Permits);

impl Permits {
    pub(super) fn new(count: usize) -> Permits {
        Permits {
            free: std::sync::Mutex::new(count),
            returned: std::sync::Condvar::new(),
        }
    }

    pub(super) fn take(&self) -> Permit<'_> {
        // A poisoned lock only means another query thread panicked; the count is still right.
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.returned.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.returned.notify_one();
    }
}
