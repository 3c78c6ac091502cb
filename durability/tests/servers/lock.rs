//! Who is using a server, so that a test that disturbs it (restarts it, kills its
//! connections) runs while no other test of the binary uses it. Shared with the cross-process
//! tests (`tests/tests/`).

use std::sync::{Condvar, Mutex, PoisonError};

/// Who is using one server: `n > 0` tests share it, `-1` one test has it alone.
pub(crate) struct ServerLock {
    users: Mutex<isize>,
    changed: Condvar,
}

impl ServerLock {
    pub(crate) const fn new() -> Self {
        ServerLock {
            users: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    /// Waits (blocking this test's thread) until no test has the server alone.
    pub(crate) fn shared(&'static self) -> Hold {
        self.take(false)
    }

    /// Waits (blocking this test's thread) until no other test uses the server.
    pub(crate) fn alone(&'static self) -> Hold {
        self.take(true)
    }

    /// The server alone ([`ServerLock::alone`]) or shared ([`ServerLock::shared`]).
    pub(crate) fn take(&'static self, alone: bool) -> Hold {
        let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        while if alone { *users != 0 } else { *users < 0 } {
            users = self
                .changed
                .wait(users)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *users = if alone { -1 } else { *users + 1 };
        Hold { lock: self, alone }
    }
}

/// A test's use of a server, released when dropped.
pub(crate) struct Hold {
    lock: &'static ServerLock,
    alone: bool,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut users = self
            .lock
            .users
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *users = if self.alone { 0 } else { *users - 1 };
        self.lock.changed.notify_all();
    }
}
