//! What a federated profile knows of its members' names (docs/federation.md): the tools and prompts
//! each member listed, merged into the names clients see, and the resource URIs and
//! templates each listed, so that a call or a read finds its member. It is learnt from
//! every list that passes and, when a client names something not known yet, from
//! mcpgate's own reads of the lists (`pipeline::back::federated`); a member's list_changed
//! makes it read anew.

use super::{Merged, merge, template};
use crate::config::federation::Federation;
use crate::mcp::jsonrpc::ListKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The most names kept per member and list, so a member cannot make mcpgate hold
/// without bound what it lists.
pub const MAX_NAMES: usize = 10_000;

/// How soon after a read of the members' lists a name no member showed may cause another.
pub const REREAD_AFTER: Duration = Duration::from_secs(1);

/// A federated profile's names.
pub struct Directory {
    known: RwLock<Known>,
    /// Tools (0) and prompts (1) merged, read by every call without a lock or a count
    /// the worker threads share.
    merged: [arc_swap::ArcSwap<Merged>; 2],
    /// When the members' lists of each kind (in `ListKind::ALL` order) were last read by
    /// mcpgate itself, for a name nobody knew, and the kind's [`Directory::changes`] then.
    pub read_at: tokio::sync::Mutex<[Option<(Instant, u64)>; 4]>,
    /// How many times each kind was forgotten (a member said its list changed): a read
    /// after a change is never skipped as too soon.
    changes: [std::sync::atomic::AtomicU64; 4],
    /// The profile's name, and per kind (tools, prompts) how many member names are not
    /// shown because another member shows the same name (`mcpgate_federation_shadowed`).
    profile: Arc<str>,
    shadowed: [Gauge; 2],
}

/// The labels of `mcpgate_federation_shadowed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowedLabels {
    profile: String,
    kind: &'static str,
}

const SLOT_KINDS: [&str; 2] = ["tool", "prompt"];

#[derive(Default)]
struct Known {
    /// Per member, the tools (index 0) and prompts (1) of its last whole list (every page
    /// read, from the first to the one without a next cursor); `None`: none yet.
    names: [Vec<Option<Vec<String>>>; 2],
    /// The names of the pages read since a member's last first page, made its whole list
    /// when its last page comes.
    partial: [Vec<Vec<String>>; 2],
    uris: Vec<Vec<String>>,
    templates: Vec<Vec<String>>,
}

/// A kind's place in `ListKind::ALL`.
pub fn place(kind: ListKind) -> usize {
    ListKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

fn slot(kind: ListKind) -> Option<usize> {
    match kind {
        ListKind::Tools => Some(0),
        ListKind::Prompts => Some(1),
        ListKind::Resources | ListKind::ResourceTemplates => None,
    }
}

impl Directory {
    fn new(members: usize, profile: &str, shadowed: [Gauge; 2]) -> Directory {
        Directory {
            profile: Arc::from(profile),
            shadowed,
            known: RwLock::new(Known {
                names: [vec![None; members], vec![None; members]],
                partial: [vec![Vec::new(); members], vec![Vec::new(); members]],
                uris: vec![Vec::new(); members],
                templates: vec![Vec::new(); members],
            }),
            merged: Default::default(),
            read_at: tokio::sync::Mutex::new([None; 4]),
            changes: Default::default(),
        }
    }

    /// What `member` listed in a page of its `kind` list: `first` when the page is its
    /// first, `last` when it has no next page. Tools and prompts are merged anew when
    /// what is known of them changed: a member's names are its last whole list and the
    /// pages read since, so a page never takes away a name another page showed.
    pub fn learn(
        &self,
        fed: &Federation,
        kind: ListKind,
        member: usize,
        first: bool,
        last: bool,
        names_given: &[std::borrow::Cow<'_, str>],
    ) {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        let Some(s) = slot(kind) else {
            let list = match kind {
                ListKind::Resources => known.uris.get_mut(member),
                _ => known.templates.get_mut(member),
            };
            if let Some(list) = list {
                if first {
                    list.clear();
                }
                add(list, names_of(names_given));
            }
            return;
        };
        let changed = {
            let Known { names, partial, .. } = &mut *known;
            // The usual list: one page, as it was. Nothing to learn, nothing allocated.
            let same = |w: &Vec<String>| {
                w.len() == names_given.len() && w.iter().zip(names_given).all(|(a, b)| a == b)
            };
            if first
                && last
                && names[s]
                    .get(member)
                    .and_then(Option::as_ref)
                    .is_some_and(same)
            {
                if let Some(p) = partial[s].get_mut(member) {
                    p.clear();
                }
                return;
            }
            let (Some(whole), Some(partial)) =
                (names[s].get_mut(member), partial[s].get_mut(member))
            else {
                return;
            };
            if first {
                partial.clear();
            }
            add(partial, names_of(names_given));
            if last {
                let changed = whole.as_ref() != Some(partial);
                *whole = Some(std::mem::take(partial));
                changed
            } else if let Some(w) = whole.as_mut() {
                let had = w.len();
                add(w, names_of(names_given));
                w.len() != had
            } else {
                true
            }
        };
        if changed {
            let next = merged(fed, &known.names[s], &known.partial[s]);
            let before = self.merged[s].load();
            self.tell_collisions(fed, s, &before, &next);
            self.merged[s].store(Arc::new(next));
        }
    }

    /// Under `prefix = "always"` or `"never"` two members may show one name; the first
    /// keeps it and the other's is not shown (docs/federation.md). Each new such name is a
    /// warning naming both, and the count of names not shown is a metric, so an operator
    /// learns it at run time and not only from `check --probe`.
    fn tell_collisions(&self, fed: &Federation, s: usize, before: &Merged, next: &Merged) {
        let member = |m: usize| fed.members.get(m).map_or("?", |x| &*x.name);
        for c in &next.collisions {
            if before.collisions.iter().any(|b| b == c) {
                continue;
            }
            let Some(((keeper, kept), others)) = c.claims.split_first() else {
                continue;
            };
            let shadowed: Vec<String> = others
                .iter()
                .map(|(m, own)| format!("{} {own}", member(*m)))
                .collect();
            tracing::warn!(
                profile = %self.profile,
                kind = SLOT_KINDS[s],
                name = %c.name,
                kept = format!("{} {kept}", member(*keeper)),
                shadowed = shadowed.join(", "),
                "a federated member's name is not shown: another member shows the same name (prefix or rename one)"
            );
        }
        let hidden: usize = next.collisions.iter().map(|c| c.claims.len() - 1).sum();
        self.shadowed[s].set(hidden as i64);
    }

    /// Whether every member's whole `kind` list is known.
    pub fn complete(&self, kind: ListKind) -> bool {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        slot(kind).is_none_or(|s| known.names[s].iter().all(Option::is_some))
    }

    /// Forgets what `member` listed of `kind` (it said that list changed; resources go
    /// with their templates): a name no member shows then makes mcpgate read the lists
    /// again. The names of the list stay routable until it is read again, so that a call
    /// made with them meanwhile still reaches its member.
    pub fn forget(&self, member: usize, kind: ListKind) {
        let kinds: &[ListKind] = match kind {
            ListKind::Resources | ListKind::ResourceTemplates => {
                &[ListKind::Resources, ListKind::ResourceTemplates]
            }
            ListKind::Tools => &[ListKind::Tools],
            ListKind::Prompts => &[ListKind::Prompts],
        };
        for k in kinds {
            self.changes[place(*k)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(s) = slot(kind) {
            // Not whole any more: the next list (or read) is asked for it all again.
            let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
            if let Some(l) = known.names[s].get_mut(member)
                && let Some(names) = l.take()
                && let Some(p) = known.partial[s].get_mut(member)
            {
                *p = names;
            }
        }
    }

    /// How many times `kind` was forgotten.
    pub fn changes(&self, kind: ListKind) -> u64 {
        self.changes[place(kind)].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The names of `kind` (tools or prompts) as the clients see them.
    pub fn names(&self, kind: ListKind) -> arc_swap::Guard<Arc<Merged>> {
        self.merged[slot(kind).unwrap_or(0)].load()
    }

    /// The member that serves `uri`: the first whose resource list holds it, else the
    /// first whose template makes it.
    pub fn resource_member(&self, uri: &str) -> Option<usize> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        known
            .uris
            .iter()
            .position(|l| l.iter().any(|u| u == uri))
            .or_else(|| {
                known
                    .templates
                    .iter()
                    .position(|l| l.iter().any(|t| template::matches(t, uri)))
            })
    }
}

fn names_of<'n>(names: &'n [std::borrow::Cow<'_, str>]) -> impl Iterator<Item = &'n str> {
    names.iter().map(|n| &**n)
}

/// Adds the names not in `list` yet, up to [`MAX_NAMES`].
fn add<'n>(list: &mut Vec<String>, names: impl Iterator<Item = &'n str>) {
    for n in names {
        if list.len() >= MAX_NAMES {
            break;
        }
        if !list.iter().any(|k| k == n) {
            list.push(n.to_string());
        }
    }
}

/// The names of each member (its whole list, and the pages read since) merged.
fn merged(fed: &Federation, whole: &[Option<Vec<String>>], partial: &[Vec<String>]) -> Merged {
    let members: Vec<(&str, Vec<&str>)> = fed
        .members
        .iter()
        .zip(whole.iter().zip(partial))
        .map(|(m, (w, p))| {
            let names = w.iter().flatten().chain(p).map(String::as_str).collect();
            (&*m.name, names)
        })
        .collect();
    merge(&members, fed.prefix, &fed.separator)
}

/// The directories of the federated profiles, by profile name and what shapes its names
/// (members, prefix, separator): a reload that changes those starts a new one. Also how
/// each member answered its profile's last fan-out, for the status page.
#[derive(Default)]
pub struct Directories {
    by_profile: Mutex<HashMap<String, Arc<Directory>>>,
    members: Mutex<std::collections::BTreeMap<(String, String), Answered>>,
    shadowed: Family<ShadowedLabels, Gauge>,
    /// Per federated profile and member: whether it answered its last fan-out
    /// (`mcpgate_federation_member_available`), and how many it did not
    /// (`mcpgate_federation_member_unavailable`).
    available: Family<MemberLabels, Gauge>,
    unavailable: Family<MemberLabels, prometheus_client::metrics::counter::Counter>,
}

/// The labels of a member's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    profile: String,
    member: String,
}

/// A directory handed out on this thread: of which `Directories` (its address), for
/// which federation.
type Near = (usize, std::sync::Weak<Federation>, Arc<Arc<Directory>>);

/// How a member answered its profile's last fan-out.
#[derive(Debug, Clone)]
pub struct Answered {
    pub profile: String,
    pub member: String,
    pub available: bool,
    pub at: std::time::SystemTime,
    pub error: Option<String>,
}

/// A thread's handle on a directory ([`Directories::of`]): cloning and dropping it writes
/// the count of this thread's handle, not that of the directory the workers share.
#[derive(Clone)]
#[allow(clippy::redundant_allocation)] // The second allocation is the point: its own count.
pub struct Handle(Arc<Arc<Directory>>);

impl std::ops::Deref for Handle {
    type Target = Directory;

    fn deref(&self) -> &Directory {
        &self.0
    }
}

impl Directories {
    /// Notes how `member` of `profile` answered a fan-out (`Err`: why it did not), for the
    /// status page and the member's series.
    pub fn answered(&self, profile: &str, member: &str, result: Result<(), &str>) {
        let labels = MemberLabels {
            profile: profile.to_string(),
            member: member.to_string(),
        };
        self.available
            .get_or_create(&labels)
            .set(i64::from(result.is_ok()));
        if result.is_err() {
            self.unavailable.get_or_create(&labels).inc();
        }
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let key = (profile.to_string(), member.to_string());
        // A name cut so a hostile answer cannot bloat the page.
        let error = result.err().map(|e| e.chars().take(300).collect());
        members.insert(
            key,
            Answered {
                profile: profile.to_string(),
                member: member.to_string(),
                available: error.is_none(),
                at: std::time::SystemTime::now(),
                error,
            },
        );
    }

    /// Every member's last answer, by profile and member.
    pub fn members(&self) -> Vec<Answered> {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        members.values().cloned().collect()
    }

    /// The directory of the federated `profile` (of `fed`), through this thread's own
    /// handle on it, so that taking and dropping it per request writes no count the
    /// other worker threads share (as `Gateway::live_here`).
    pub fn of(&self, profile: &str, fed: &Arc<Federation>) -> Handle {
        thread_local! {
            /// Per thread: which directories (of which `Directories`, for which
            /// federation) it last handed out.
            static NEAR: std::cell::RefCell<Vec<Near>> =
                const { std::cell::RefCell::new(Vec::new()) };
        }
        let me = self as *const Directories as usize;
        let near = NEAR.try_with(|near| {
            near.borrow()
                .iter()
                .find(|(at, f, _)| *at == me && std::ptr::eq(f.as_ptr(), Arc::as_ptr(fed)))
                .map(|(_, _, d)| d.clone())
        });
        if let Ok(Some(d)) = near {
            return Handle(d);
        }
        let d = Arc::new(self.shared(profile, fed));
        let _ = NEAR.try_with(|near| {
            let mut near = near.borrow_mut();
            // A handful per thread: a reload's old ones go first.
            if near.len() >= 16 {
                near.remove(0);
            }
            near.push((me, Arc::downgrade(fed), d.clone()));
        });
        Handle(d)
    }

    /// The directory of the federated `profile` (of `fed`), for what outlives a request
    /// (a stream), and for a thread's first request with `fed`: a reload that keeps the
    /// profile's members, prefix and separator keeps its directory.
    pub fn shared(&self, profile: &str, fed: &Federation) -> Arc<Directory> {
        let mut key = String::with_capacity(64);
        key.push_str(profile);
        for m in &fed.members {
            key.push('\0');
            key.push_str(&m.name);
        }
        key.push('\0');
        key.push_str(match fed.prefix {
            crate::config::federation::Prefix::Always => "a",
            crate::config::federation::Prefix::OnConflict => "c",
            crate::config::federation::Prefix::Never => "n",
        });
        key.push_str(&fed.separator);
        let mut map = self.by_profile.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = map.get(&key) {
            return d.clone();
        }
        // A reload's new shape replaces the profile's old one.
        map.retain(|k, _| k.split('\0').next() != Some(profile));
        let gauges = SLOT_KINDS.map(|kind| {
            self.shadowed
                .get_or_create(&ShadowedLabels {
                    profile: profile.to_string(),
                    kind,
                })
                .clone()
        });
        let d = Arc::new(Directory::new(fed.members.len(), profile, gauges));
        map.insert(key, d.clone());
        d
    }

    /// Directories whose `mcpgate_federation_shadowed` is registered in `registry`.
    pub fn registered(registry: &mut prometheus_client::registry::Registry) -> Directories {
        let d = Directories::default();
        registry.register(
            "federation_shadowed",
            "Names a federated profile's members list that are not shown because another member shows the same name (prefix = always or never)",
            d.shadowed.clone(),
        );
        registry.register(
            "federation_member_available",
            "Whether a federated profile's member answered its last fan-out (1) or not (0)",
            d.available.clone(),
        );
        registry.register(
            "federation_member_unavailable",
            "Fan-outs of a federated profile that a member did not answer in time or at all",
            d.unavailable.clone(),
        );
        d
    }
}
