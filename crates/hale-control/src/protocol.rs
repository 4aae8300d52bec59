//! The control plane's protocol versions: which one every control request
//! and Raft RPC says it speaks, the form of the answer each asker gets,
//! and the rule that keeps a leader from writing a log entry that some
//! server could not apply.
//!
//! * **Version 1** is what the release before versioning spoke (0.1.0,
//!   commit 67c6e85, `dist/previous-release.toml`): sealed JSON requests
//!   with no version anywhere, answers as bare JSON (`{"Ok": ...}`, a lease
//!   table, openraft's answers).
//! * **Version 2** (0.2.0 builds up to `b42d83c`): every request says the
//!   highest version its sender speaks in the [`HEADER`] header. A server
//!   answers an asker that says nothing (version 1) exactly as version 1
//!   did; an asker speaking 2 or more gets the answer wrapped with the
//!   server's own version, `{"protocol": 2, "answer": <version 1 body>}`
//!   ([`Envelope`]), inside the sealed body, and the same header on the
//!   answer saying which form the body has.
//!
//! **What is authenticated.** The header on a request is not (the seal's
//! associated data predates it, and changing it would lock out the
//! previous release): a stranger on the path can change it, and can do no
//! more harm with it than by dropping the request. Raising it gets an old
//! client an answer it cannot decode (no answer); lowering it gets a new
//! one the version-1 form (which it reads, taking the server for an old
//! one); neither changes what the server does. The version a server
//! *learns* about another, the one the leader's gate relies on, is never
//! taken from a header: only from the `protocol` inside a sealed answer
//! ([`Spoken`]). The header on an answer only says which form to decode;
//! a forged one makes the answer undecodable (no answer, as a drop).
//!
//! **Newer than the server.** A request from a client speaking a newer
//! version that the server cannot decode is refused with
//! [`crate::raft::api::Refusal::TooNew`] naming both versions (retryable: nothing was done),
//! not a decode failure; the previous release answers such a request with
//! axum's `422` (it ignores the header), which [`crate::raft::ControlClient`]
//! and the servers' own calls read as the same refusal. A client writes
//! every request in the oldest form that can say it, so a newer client's
//! ordinary requests are served by older servers; a request that changes
//! meaning is a new request kind (a new variant, which an older server
//! refuses to decode), never a new field on an old kind (which it would
//! silently ignore).
//!
//! **The log.** An entry is applied by every server; one that a server
//! cannot decode stops its Raft. So the leader writes an entry only when
//! every server of the membership speaks the version that introduced its
//! kind ([`needs`], [`common`], [`admit`], [`admit_servers`]), as it last
//! heard each of them answer. What a server hears is kept in its data
//! directory ([`Spoken::persisted`]), so a restarted leader knows what it
//! knew. A server never heard from is not taken for an old one: an entry
//! that every server heard speaks is refused as *not yet* (retryable,
//! [`Unadmitted::Unheard`]), and one that some server heard cannot read
//! as *too new* ([`Unadmitted::TooNew`], which a holder takes for a mixed
//! cluster and answers with the previous release's plain renewals: a leader
//! just elected that counted a server it had not heard yet as the oldest
//! release sent a holder there, and its adoption by renewal took a holding
//! its crashed predecessor's watchdog had fenced, nemesis seeds 40003 and
//! 40013). Version 2 introduced no new entry kind; version 3 introduced two
//! (below).
//!
//! * **Version 3** (this build, [`PROTOCOL`]): the entry kinds
//!   [`LeaseRequest::Keep`] and [`LeaseRequest::Adopt`] (a kept holding is
//!   recorded in the table, and only its keeper adopts it), and the refusal
//!   `holder-kept`. Until every server speaks 3, a stopping holder keeps its
//!   paused role by a plain renewal and its next run adopts it by one, as
//!   0.2.0 did ([`crate::holder`]).
//!
//! **The failover history** ([`crate::lease::changes`]) came with no new
//! version: it changes no request's meaning, so it needs none. Its fields
//! (`origin` on grants, releases, pauses and switchovers, `reason` on
//! releases) only inform, and a server that does not know them ignores
//! them (an older server keeps no history; a new server applying an older
//! leader's entries records them with the time unknown). Its read,
//! `/control/history`, is a new route: a server of 0.1.0 answers it 404
//! and the client asks the next server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use hale_seal::{CallError, Target};

use crate::auth::ControlAuth;
use crate::lease::LeaseRequest;

/// The newest control-plane protocol this build speaks (it speaks every
/// one from [`OLDEST_PROTOCOL`] up).
pub const PROTOCOL: u16 = 3;
/// The oldest control-plane protocol this build speaks: the previous
/// release's (commit 67c6e85), which says no version at all.
pub const OLDEST_PROTOCOL: u16 = 1;
/// The HTTP header naming the protocol a request's sender speaks (and on
/// an answer, the form of its body).
pub const HEADER: &str = "hale-protocol";

/// The protocol a request's (or an answer's) headers say: absent (the
/// previous release sends none), or anything but a whole number from 1
/// to 65535, it is version 1, the form every release reads.
pub fn spoken(headers: &HeaderMap) -> u16 {
    headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u16>().ok())
        .filter(|v| *v >= OLDEST_PROTOCOL)
        .unwrap_or(OLDEST_PROTOCOL)
}

/// An answer in the version-2 form: the answering server's own protocol
/// (authenticated: it is inside the sealed body) and the version-1 body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// The highest protocol the answering server speaks.
    pub protocol: u16,
    /// The answer, as version 1 would have sent it.
    pub answer: T,
}

/// The version of a log entry's kind: the protocol that introduced it. A
/// leader writes it only when every server speaks that version
/// ([`admit`]). Every kind this build knows was there in version 1; a new
/// kind gets the version that introduces it here (the match has no
/// catch-all, so adding a variant without deciding does not compile).
pub fn needs(req: &LeaseRequest) -> u16 {
    match req {
        LeaseRequest::Grant { .. }
        | LeaseRequest::Renew { .. }
        | LeaseRequest::Release { .. }
        | LeaseRequest::Renewals { .. }
        | LeaseRequest::Pause { .. }
        | LeaseRequest::Switchover { .. } => 1,
        // A kept holding recorded in the table, and its adoption.
        LeaseRequest::Keep { .. } | LeaseRequest::Adopt { .. } => 3,
        LeaseRequest::Batch(reqs) => reqs.iter().map(needs).max().unwrap_or(1),
    }
}

/// Why a log entry was not written: it needs a newer protocol than every
/// server speaks yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the entry needs control-plane protocol {needs}, but some server speaks only up to {common}"
)]
pub struct TooNew {
    /// The version that introduced the entry's kind.
    pub needs: u16,
    /// The highest version every server speaks.
    pub common: u16,
}

/// Why the leader may not write an entry yet ([`admit_servers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unadmitted {
    /// A server was heard to speak an older protocol than the entry needs.
    TooNew(TooNew),
    /// Every server heard speaks it, but these were never heard from (a
    /// leader just started or elected, a server down since): retry.
    Unheard {
        /// The version that introduced the entry's kind.
        needs: u16,
        /// The servers not heard from.
        servers: Vec<u64>,
    },
}

/// The leader's gate over the membership `servers`: an entry that needs
/// protocol `needs` may be written only when every server was heard to
/// speak it (`ours` for this server, `me`). A server never heard from is
/// reason to wait ([`Unadmitted::Unheard`]), not taken for an old release.
pub fn admit_servers(
    needs: u16,
    servers: &[u64],
    me: u64,
    ours: u16,
    spoken: &BTreeMap<u64, u16>,
) -> Result<(), Unadmitted> {
    let common = common(servers.iter().copied(), me, ours, spoken);
    if needs <= common {
        return Ok(());
    }
    let heard = servers
        .iter()
        .filter_map(|id| match *id == me {
            true => Some(ours),
            false => spoken.get(id).copied(),
        })
        .fold(ours, u16::min);
    let unheard: Vec<u64> = servers
        .iter()
        .copied()
        .filter(|id| *id != me && !spoken.contains_key(id))
        .collect();
    match heard >= needs && !unheard.is_empty() {
        true => Err(Unadmitted::Unheard {
            needs,
            servers: unheard,
        }),
        false => Err(Unadmitted::TooNew(TooNew { needs, common })),
    }
}

/// The leader's gate: an entry that needs protocol `needs` may be written
/// only when every server speaks it (`common`, from [`common`]).
pub fn admit(needs: u16, common: u16) -> Result<(), TooNew> {
    (needs <= common)
        .then_some(())
        .ok_or(TooNew { needs, common })
}

/// The highest protocol every one of `servers` speaks: `ours` for this
/// server (`me`), what each other one last said in an authenticated
/// answer, and [`OLDEST_PROTOCOL`] for one not heard from yet.
pub fn common(
    servers: impl IntoIterator<Item = u64>,
    me: u64,
    ours: u16,
    spoken: &BTreeMap<u64, u16>,
) -> u16 {
    servers
        .into_iter()
        .map(|id| match id == me {
            true => ours,
            false => spoken.get(&id).copied().unwrap_or(OLDEST_PROTOCOL),
        })
        .fold(ours, u16::min)
}

/// What each other control-plane server was last heard to speak, learned
/// only from the `protocol` inside its sealed answers (an answer in the
/// version-1 form says 1). Shared by a server's Raft network, its
/// forwarding calls and its status; cheap to clone. A server's own is
/// kept in a file of its data directory ([`Spoken::persisted`]).
#[derive(Debug, Clone, Default)]
pub struct Spoken {
    heard: Arc<Mutex<BTreeMap<u64, u16>>>,
    file: Option<Arc<std::path::PathBuf>>,
}

/// The file in a server's data directory that keeps what it heard.
const SPOKEN_FILE: &str = "spoken.json";

impl Spoken {
    /// What this server heard before it last stopped, read from `dir`
    /// (nothing when the file is absent or unreadable: every server is
    /// then unheard until it answers), kept there as it changes.
    pub fn persisted(dir: &std::path::Path) -> Spoken {
        let file = dir.join(SPOKEN_FILE);
        let heard = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<BTreeMap<u64, u16>>(&b).ok())
            .unwrap_or_default();
        Spoken {
            heard: Arc::new(Mutex::new(heard)),
            file: Some(Arc::new(file)),
        }
    }

    /// Server `id` answered in `protocol`'s form; logged when that changes
    /// what was known of it (an upgrade or a downgrade under way), and kept
    /// in the data directory.
    pub fn note(&self, id: u64, protocol: u16) {
        let before = {
            let mut heard = self.lock();
            let before = heard.insert(id, protocol);
            // Written under the lock, so that two changes at once cannot
            // leave the older one in the file (it changes rarely).
            if let (true, Some(file)) = (before != Some(protocol), &self.file) {
                keep(file, &heard);
            }
            before
        };
        match before {
            Some(b) if b != protocol => tracing::info!(
                server = id,
                protocol,
                "control-plane server {id} now speaks protocol {protocol} (was {b})"
            ),
            None => tracing::debug!(server = id, protocol, "control-plane server speaks"),
            Some(_) => {}
        }
    }

    /// What server `id` was last heard to speak, if it was.
    pub fn of(&self, id: u64) -> Option<u16> {
        self.lock().get(&id).copied()
    }

    /// Every server heard from, with what it speaks.
    pub fn all(&self) -> BTreeMap<u64, u16> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u16>> {
        self.heard.lock().expect("spoken versions lock")
    }
}

/// Writes `heard` to `file` (a new file renamed over the old, so a crash
/// leaves one or the other). Best effort: a file not written costs only a
/// wait for servers to answer after a restart.
fn keep(file: &std::path::Path, heard: &BTreeMap<u64, u16>) {
    let tmp = file.with_extension("json.tmp");
    let wrote = serde_json::to_vec(heard)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&tmp, b))
        .and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = wrote {
        tracing::warn!(file = %file.display(), "could not keep what servers speak: {e}");
    }
}

/// The protocol the asker of a request speaks, as its header says (the
/// routes answer in its form). Outside the server's protocol layer
/// (`raft/routes.rs`, `speak`): version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asker(pub u16);

impl<S: Send + Sync> FromRequestParts<S> for Asker {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Asker, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Asker>()
            .copied()
            .unwrap_or(Asker(OLDEST_PROTOCOL)))
    }
}

/// An answer with the protocol of the server that gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard<T> {
    /// The answer.
    pub answer: T,
    /// The highest protocol its server speaks (1: it answered in the
    /// version-1 form, as the previous release does).
    pub protocol: u16,
}

/// One sealed call (see [`hale_seal::exchange`]) saying that its sender
/// speaks `ours` (nothing at 1, as the previous release), with the answer
/// decoded from the form its server chose.
pub async fn call<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
    http: &reqwest::Client,
    auth: &ControlAuth,
    to: Target<'_>,
    body: &Req,
    timeout: Duration,
    ours: u16,
) -> Result<Heard<Resp>, CallError> {
    let json = serde_json::to_vec(body).map_err(|e| CallError::Decode(e.to_string()))?;
    let mut headers = reqwest::header::HeaderMap::new();
    if ours >= 2 {
        headers.insert(HEADER, HeaderValue::from(ours));
    }
    let reply = hale_seal::exchange(http, auth, to, &json, &headers, timeout).await?;
    decode(&reply.headers, &reply.body)
}

/// An answer's body in the form its header names: version 1 bare, later
/// ones in an [`Envelope`] whose `protocol` (sealed) is what counts.
pub fn decode<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Heard<T>, CallError> {
    let bad = |e: serde_json::Error| CallError::Decode(e.to_string());
    if spoken(headers) < 2 {
        let answer = serde_json::from_slice(body).map_err(bad)?;
        return Ok(Heard {
            answer,
            protocol: OLDEST_PROTOCOL,
        });
    }
    let e: Envelope<T> = serde_json::from_slice(body).map_err(bad)?;
    if e.protocol < 2 {
        return Err(CallError::Decode(format!(
            "an answer in the protocol 2 form says its server speaks protocol {}",
            e.protocol
        )));
    }
    Ok(Heard {
        answer: e.answer,
        protocol: e.protocol,
    })
}

/// Whether a server refused a request because it could not decode it:
/// the previous release's answer to a request newer than it (axum's `422`,
/// or `400` for a body that is not JSON to it).
pub fn undecodable(e: &CallError) -> bool {
    matches!(
        e,
        CallError::Refused {
            status: 400 | 422,
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_request_without_the_header_or_with_a_garbled_one_speaks_version_1() {
        let mut h = HeaderMap::new();
        assert_eq!(spoken(&h), 1);
        for (v, is) in [
            ("2", 2),
            (" 3 ", 3),
            ("0", 1),
            ("x", 1),
            ("70000", 1),
            ("-2", 1),
        ] {
            h.insert(HEADER, HeaderValue::from_static(v));
            assert_eq!(spoken(&h), is, "{v:?}");
        }
    }

    #[test]
    fn every_entry_kind_of_this_build_is_one_the_previous_release_applies() {
        let renew = LeaseRequest::Renew {
            role: "db".into(),
            holder: "a".into(),
            epoch: 1,
            mark: None,
        };
        let pause = LeaseRequest::Pause {
            role: "db".into(),
            paused: true,
            force: true,
            origin: crate::lease::Origin::by("n1"),
        };
        assert_eq!(needs(&renew), 1);
        assert_eq!(needs(&LeaseRequest::Batch(vec![renew, pause])), 1);
        assert_eq!(needs(&LeaseRequest::Batch(vec![])), 1);
    }

    #[test]
    fn the_leader_writes_an_entry_only_when_every_server_speaks_its_version() {
        let heard = BTreeMap::from([(2, 2), (3, 1)]);
        // Server 3 answered in the version-1 form; server 4 was never heard.
        assert_eq!(common([1, 2, 3], 1, 2, &heard), 1);
        assert_eq!(common([1, 2, 4], 1, 2, &heard), 1);
        assert_eq!(common([1, 2], 1, 2, &heard), 2);
        // A newer server than this one does not raise what this one speaks.
        assert_eq!(common([1, 2], 1, 2, &BTreeMap::from([(2, 5)])), 2);
        assert_eq!(admit(1, 1), Ok(()));
        assert_eq!(admit(2, 2), Ok(()));
        assert_eq!(
            admit(2, 1),
            Err(TooNew {
                needs: 2,
                common: 1
            })
        );
        let e = admit(3, 2).unwrap_err().to_string();
        assert!(
            e.contains("needs control-plane protocol 3") && e.contains("up to 2"),
            "{e}"
        );
    }

    #[test]
    fn a_server_never_heard_from_is_waited_for_not_taken_for_an_old_release() {
        let heard = BTreeMap::from([(2, 3)]);
        // Server 3 was never heard: wait for it, whatever the entry needs
        // beyond the oldest.
        assert_eq!(
            admit_servers(3, &[1, 2, 3], 1, 3, &heard),
            Err(Unadmitted::Unheard {
                needs: 3,
                servers: vec![3]
            })
        );
        assert_eq!(admit_servers(1, &[1, 2, 3], 1, 3, &heard), Ok(()));
        assert_eq!(admit_servers(3, &[1, 2], 1, 3, &heard), Ok(()));
        // Server 2 was heard to speak 2: too new, unheard or not.
        let heard = BTreeMap::from([(2, 2)]);
        assert_eq!(
            admit_servers(3, &[1, 2, 3], 1, 3, &heard),
            Err(Unadmitted::TooNew(TooNew {
                needs: 3,
                common: 1
            }))
        );
    }

    #[test]
    fn what_a_server_heard_is_kept_in_its_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spoken::persisted(dir.path());
        assert!(s.all().is_empty());
        s.note(2, 3);
        s.note(3, 1);
        s.note(3, 2);
        let again = Spoken::persisted(dir.path());
        assert_eq!(again.all(), BTreeMap::from([(2, 3), (3, 2)]));
        // An unreadable file is as none: every server unheard.
        std::fs::write(dir.path().join(SPOKEN_FILE), b"{not json").unwrap();
        assert!(Spoken::persisted(dir.path()).all().is_empty());
    }

    #[test]
    fn an_answer_is_read_in_the_form_its_header_names() {
        let mut h = HeaderMap::new();
        let bare: Heard<Option<u64>> = decode(&h, b"7").unwrap();
        assert_eq!((bare.answer, bare.protocol), (Some(7), 1));
        h.insert(HEADER, HeaderValue::from_static("2"));
        let wrapped: Heard<Option<u64>> = decode(&h, br#"{"protocol":2,"answer":7}"#).unwrap();
        assert_eq!((wrapped.answer, wrapped.protocol), (Some(7), 2));
        // A header forged onto a bare answer, or taken off a wrapped one:
        // undecodable (as if no answer came), never misread.
        assert!(decode::<Option<u64>>(&h, b"7").is_err());
        let wrapped = br#"{"protocol":2,"answer":7}"#;
        assert!(decode::<Option<u64>>(&HeaderMap::new(), wrapped).is_err());
        assert!(decode::<Option<u64>>(&h, br#"{"protocol":1,"answer":7}"#).is_err());
    }
}
