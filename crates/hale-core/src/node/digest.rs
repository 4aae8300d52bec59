//! A peer's digest as Node merges it: the deaths and departures in it go
//! through the membership rules (`rules.rs`). The rest of the periodic sync
//! (summaries, bucket sums, this node's digests) is in `digest.rs`.

use crate::digest::rank;
use crate::identity::Identity;
use crate::table::{bucket_of, FxMap};
use crate::time::Time;
use crate::wire::{Channel, MemberRecord, Message, WireState};

use super::Node;

impl<I: Identity> Node<I> {
    /// A peer's digest (`part`: of those buckets only, `None`: whole):
    /// merges the deaths and departures in it, answers with the whole
    /// records this node knows better, and with its own digest of the same
    /// members if `reply` (see the module documentation).
    pub(crate) fn answer_digest(
        &mut self,
        now: Time,
        from: &I,
        reply: bool,
        part: Option<u64>,
        members: Vec<MemberRecord<I>>,
    ) {
        self.recovery.mark_synced();
        let mut buf = Vec::new();
        let mut theirs: FxMap<I, (u32, u8)> = FxMap::default();
        theirs.reserve(members.len());
        for r in members {
            // A record outside the buckets it claims to cover is malformed:
            // skipped.
            if part.is_some_and(|p| p & 1 << bucket_of(&r.id, &mut buf) == 0) {
                continue;
            }
            theirs.insert(r.id.clone(), (r.incarnation, rank(r.state)));
            if matches!(r.state, WireState::Dead | WireState::Left) {
                self.merge_record(now, Some(from), r);
            }
        }
        let mine = self.sh.digest_records_in(part);
        // Chosen without metadata; only what is sent gets its metadata copied.
        let mut better: Vec<MemberRecord<I>> = mine
            .iter()
            .filter(|m| match theirs.get(&m.id) {
                Some(&(inc, r)) => (m.incarnation, rank(m.state)) > (inc, r),
                // Never teach a member through its death.
                None => matches!(m.state, WireState::Alive | WireState::Suspect),
            })
            .cloned()
            .collect();
        for r in &mut better {
            r.meta = if r.id == *self.sh.local().id() {
                self.sh.local().meta().into()
            } else {
                self.sh.members().meta(&r.id).into()
            };
        }
        if better.is_empty() && !reply {
            return;
        }
        if !self.recovery.take_sync_token(&mut self.sh, now) {
            return;
        }
        let mut msgs = Vec::with_capacity(2);
        if !better.is_empty() {
            msgs.push(Message::PushPull {
                join: false,
                reply: false,
                digest: false,
                members: better,
            });
        }
        if reply {
            msgs.push(match part {
                Some(buckets) => Message::DigestPart {
                    buckets,
                    reply: false,
                    members: mine.into(),
                },
                None => Message::PushPull {
                    join: false,
                    reply: false,
                    digest: true,
                    members: mine,
                },
            });
        }
        self.sh.send(from.clone(), Channel::Stream, msgs);
    }
}
