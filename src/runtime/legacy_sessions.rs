//! What a legacy client bridged to a 2026-07-28 server changes in its session after
//! `initialize` (docs/protocol.md): its log level (`logging/setLevel`) and the resources it
//! subscribed to (`resources/subscribe`). Its session id is a seal that cannot be written
//! again, so these are kept here, on the replica that received them, under the digest of
//! the id. Each request the session forwards carries the level; the session's GET stream
//! watches the subscriptions and opens its `subscriptions/listen` anew when they change.
//!
//! Bounded: at most [`MAX_SESSIONS`] sessions (the least recently used without an open
//! stream goes first) and [`MAX_SUBSCRIPTIONS`] URIs per session.

use super::waits::Owner;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// The most sessions one replica keeps a level or subscriptions for.
pub const MAX_SESSIONS: usize = 4_096;

/// The most resources one session may subscribe to.
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// The longest URI a session may subscribe to.
pub const MAX_URI: usize = 2_048;

/// MCP's log levels, least severe first.
pub const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The URIs a session is subscribed to, in the order it subscribed, and how many times
/// they changed.
#[derive(Clone, Default)]
pub struct Wanted {
    pub version: u64,
    pub uris: Vec<Box<str>>,
}

/// What a session's GET stream watches.
pub type Subscribed = watch::Receiver<Wanted>;

/// A change of subscriptions a GET stream is to follow: done when `followed` reaches
/// `version`.
pub struct Following {
    pub followed: watch::Receiver<u64>,
    pub version: u64,
}

struct Entry {
    level: Option<&'static str>,
    uris: watch::Sender<Wanted>,
    /// The version of the subscriptions the session's GET stream listens with.
    followed: watch::Sender<u64>,
    /// When it was last used ([`Table::tick`]'s count then).
    used: u64,
}

impl Entry {
    /// Changes the subscriptions with `edit` (`true` when it changed them): the change a
    /// GET stream must follow, if one watches.
    fn change(&mut self, edit: impl FnOnce(&mut Vec<Box<str>>) -> bool) -> Option<Following> {
        let changed = self.uris.send_if_modified(|w| {
            let changed = edit(&mut w.uris);
            w.version += u64::from(changed);
            changed
        });
        (changed && self.uris.receiver_count() > 0).then(|| Following {
            followed: self.followed.subscribe(),
            version: self.uris.borrow().version,
        })
    }
}

/// The sessions kept, and a count that orders their uses.
#[derive(Default)]
struct Table {
    entries: HashMap<Owner, Entry>,
    tick: u64,
}

impl Table {
    /// `owner`'s entry, made when it has none (making room first).
    fn entry(&mut self, owner: &Owner) -> &mut Entry {
        self.tick += 1;
        let used = self.tick;
        let table = &mut self.entries;
        if !table.contains_key(owner) && table.len() >= MAX_SESSIONS {
            // The least recently used session nobody listens on; failing that, any.
            let victim = table
                .iter()
                .min_by_key(|(_, e)| (e.uris.receiver_count() > 0, e.used))
                .map(|(k, _)| *k);
            if let Some(k) = victim {
                table.remove(&k);
            }
        }
        let e = table.entry(*owner).or_insert_with(|| Entry {
            level: None,
            uris: watch::Sender::new(Wanted::default()),
            followed: watch::Sender::new(0),
            used,
        });
        e.used = used;
        e
    }
}

#[derive(Default)]
pub struct LegacySessions {
    table: Mutex<Table>,
    /// Whether any session ever set a level: until one does, a request costs no lock.
    levels: AtomicBool,
}

impl LegacySessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets `owner`'s log level; `Err` names the levels when `level` is none of them.
    pub fn set_level(&self, owner: &Owner, level: &str) -> Result<(), String> {
        let Some(level) = LEVELS.iter().find(|l| **l == level) else {
            return Err(format!("level must be one of {}", LEVELS.join(", ")));
        };
        let mut table = self.lock();
        table.entry(owner).level = Some(level);
        self.levels.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Whether any session ever set a level (until then, none has one).
    pub fn any_level(&self) -> bool {
        self.levels.load(Ordering::Relaxed)
    }

    /// `owner`'s log level, if it set one.
    pub fn level(&self, owner: &Owner) -> Option<&'static str> {
        if !self.levels.load(Ordering::Relaxed) {
            return None;
        }
        self.lock().entries.get(owner).and_then(|e| e.level)
    }

    /// Subscribes `owner` to `uri`: the change its GET stream is to follow, if one is
    /// open and `uri` is new; `Err` says why not.
    pub fn subscribe(&self, owner: &Owner, uri: &str) -> Result<Option<Following>, String> {
        if uri.is_empty() || uri.len() > MAX_URI {
            return Err(format!("uri must be 1 to {MAX_URI} bytes"));
        }
        let mut table = self.lock();
        let e = table.entry(owner);
        let full = {
            let w = e.uris.borrow();
            !w.uris.iter().any(|u| &**u == uri) && w.uris.len() >= MAX_SUBSCRIPTIONS
        };
        if full {
            return Err(format!(
                "a session subscribes to at most {MAX_SUBSCRIPTIONS} resources"
            ));
        }
        Ok(e.change(|uris| {
            let new = !uris.iter().any(|u| &**u == uri);
            if new {
                uris.push(uri.into());
            }
            new
        }))
    }

    /// Ends `owner`'s subscription to `uri`, if it had one: the change its GET stream is to
    /// follow, if one is open.
    pub fn unsubscribe(&self, owner: &Owner, uri: &str) -> Option<Following> {
        let mut table = self.lock();
        table.entries.get_mut(owner)?.change(|uris| {
            let before = uris.len();
            uris.retain(|u| &**u != uri);
            uris.len() != before
        })
    }

    /// What `owner`'s GET stream watches: its subscriptions, now and as they change. The
    /// watch ends (its `changed` fails) when the session is ended or pushed out.
    pub fn watch(&self, owner: &Owner) -> Subscribed {
        let mut table = self.lock();
        table.entry(owner).uris.subscribe()
    }

    /// Tells who waits for it that `owner`'s GET stream listens with the subscriptions of
    /// `version`.
    pub fn followed(&self, owner: &Owner, version: u64) {
        if let Some(e) = self.lock().entries.get(owner) {
            e.followed.send_if_modified(|v| {
                let later = version > *v;
                *v = (*v).max(version);
                later
            });
        }
    }

    /// Forgets `owner` (its client ended the session): its GET stream ends.
    pub fn end(&self, owner: &Owner) {
        self.lock().entries.remove(owner);
    }

    /// How many sessions are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_is_one_of_the_eight_and_kept_per_session() {
        let s = LegacySessions::default();
        assert_eq!(s.level(&[1; 32]), None);
        assert!(s.set_level(&[1; 32], "loud").unwrap_err().contains("debug"));
        s.set_level(&[1; 32], "warning").unwrap();
        assert_eq!(s.level(&[1; 32]), Some("warning"));
        assert_eq!(s.level(&[2; 32]), None);
        s.end(&[1; 32]);
        assert_eq!(s.level(&[1; 32]), None);
    }

    #[test]
    fn subscriptions_change_the_watch_only_when_they_change() {
        let s = LegacySessions::default();
        // Without a stream, nothing is to follow.
        assert!(s.subscribe(&[1; 32], "file:///z").unwrap().is_none());
        let mut w = s.watch(&[1; 32]);
        assert_eq!(w.borrow_and_update().uris, vec![Box::from("file:///z")]);
        let f = s.subscribe(&[1; 32], "file:///a").unwrap().unwrap();
        assert!(w.has_changed().unwrap());
        let wanted = w.borrow_and_update().clone();
        assert_eq!(
            wanted.uris,
            vec![Box::from("file:///z"), "file:///a".into()]
        );
        assert_eq!(wanted.version, f.version);
        s.followed(&[1; 32], f.version);
        assert_eq!(*f.followed.borrow(), f.version);
        assert!(s.subscribe(&[1; 32], "file:///a").unwrap().is_none());
        assert!(s.unsubscribe(&[1; 32], "file:///b").is_none());
        assert!(!w.has_changed().unwrap());
        assert!(s.unsubscribe(&[1; 32], "file:///a").is_some());
        assert_eq!(w.borrow_and_update().uris, vec![Box::from("file:///z")]);
        assert!(s.subscribe(&[1; 32], "").is_err());
        s.end(&[1; 32]);
        assert!(w.has_changed().is_err(), "the watch ends with the session");
    }

    #[test]
    fn bounded_in_sessions_and_subscriptions() {
        let s = LegacySessions::default();
        for i in 0..MAX_SUBSCRIPTIONS {
            s.subscribe(&[1; 32], &format!("file:///{i}")).unwrap();
        }
        assert!(s.subscribe(&[1; 32], "file:///more").is_err());
        let listened = s.watch(&[1; 32]);
        for i in 0..MAX_SESSIONS + 10 {
            let mut owner = [0; 32];
            owner[..8].copy_from_slice(&(i as u64 + 2).to_le_bytes());
            s.set_level(&owner, "info").unwrap();
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        // The session with an open stream was kept.
        assert!(listened.has_changed().is_ok());
    }
}
