//! The periodic sync: summaries, bucket sums and digests.
//!
//! A join sends and gets back whole records (`sync.rs`). The periodic sync
//! does not resend what the other side knows, and in a cluster in
//! agreement costs one small datagram:
//!
//! 1. A sends B its view's hash ([`Message::Summary`], [`crate::Node::view_hash`];
//!    version 3 on). If B's view hashes the same, nothing more happens.
//! 2. If not, and the cluster is large (B knows at least
//!    [`BUCKETED_FROM`] members) and B writes version 4 to A, B answers
//!    with its view's sums bucket by bucket ([`Message::Buckets`]), and A
//!    answers with a digest of the buckets whose sums differ
//!    ([`Message::DigestPart`]); each side only when its own view is quiet
//!    (nobody suspected, no news waiting to be gossiped), since a
//!    difference while news is in flight is usually that news. Otherwise B
//!    starts a digest of everything (a digest [`Message::PushPull`]).
//! 3. A digest carries every member's identity, incarnation and state (no
//!    metadata). Its receiver merges the deaths and departures in it at
//!    once (they carry no metadata), answers with the whole records it
//!    knows better than the digest says, and (when asked) with its own
//!    digest of the same members; the first side then sends back the
//!    whole records it knows better than that.
//!
//! So a member that gossip missed in a cluster of 10,000 costs a
//! sixty-fourth of a digest to repair, and the sync can run every
//! `push_pull_interval` whatever the cluster's size. To a member written
//! to in version 2 (which reads no summary), the sync starts with a whole
//! digest, as that version always did. Every answer spends a token of
//! `sync_replies_per_sec`.

use rand::seq::SliceRandom;

use crate::identity::Identity;
use crate::shared::Shared;
use crate::sync::Recovery;
use crate::table::{bucket_of, record_hash, ViewSums};
use crate::time::Time;
use crate::wire::{Channel, MemberRecord, Message, WireState, BUCKETS};

/// A node that knows at least this many members (itself included) answers
/// a differing summary with its bucket sums rather than a whole digest:
/// below, a whole digest costs about as much as the 513-byte sums.
pub const BUCKETED_FROM: usize = 4 * BUCKETS;

/// Buckets one digest part covers at most. Where views differ in many
/// (loss and refutations leave members' incarnations apart in a storm of
/// stalls), a sync every `push_pull_interval` exchanging all of them cost
/// nearly three times the bytes of the scaled whole-digest sync.
pub const PART_BUCKETS: usize = 8;

/// The periodic sync's side of this node's view: its hash, its sums by
/// bucket, its digests, and opening a sync.
impl<I: Identity> Shared<I> {
    /// Starts the periodic sync with `peer`: a summary, or to a member
    /// written to in version 2, a whole digest.
    pub(crate) fn open_sync(&mut self, peer: I) {
        if self.writes_v3_to(&peer) {
            // The view's hash first: a peer that agrees answers nothing.
            self.members_mut().keep_view_sum();
            let hash = self.view_hash();
            self.send(peer, Channel::Datagram, vec![Message::Summary { hash }]);
        } else {
            self.start_digest_sync(peer);
        }
    }

    /// Sends `peer` this node's whole digest, asking for its own back.
    pub(crate) fn start_digest_sync(&mut self, peer: I) {
        self.stats_mut().syncs += 1;
        let msg = Message::PushPull {
            join: false,
            reply: true,
            digest: true,
            members: self.digest_records(),
        };
        self.send(peer, Channel::Stream, vec![msg]);
    }

    /// Whether this node's view is quiet: nobody suspected, and no news but
    /// confirmations waiting to be gossiped. Only a quiet node answers a
    /// summary with bucket sums, or bucket sums with a digest part.
    pub(crate) fn settled(&self) -> bool {
        self.members().live() == self.members().alive() && !self.broadcasts().has_urgent()
    }

    /// A digest of the members in `part`'s buckets (`None`: all), this
    /// node's own record first if it is in them.
    pub(crate) fn digest_records_in(&self, part: Option<u64>) -> Vec<MemberRecord<I>> {
        let Some(p) = part else {
            return self.digest_records();
        };
        let mut buf = Vec::new();
        let mut inside = |id: &I| p & 1 << bucket_of(id, &mut buf) != 0;
        let mut out = Vec::new();
        if inside(self.local().id()) {
            out.push(self.own_record(false));
        }
        let start = out.len();
        for (id, r) in self.members().iter() {
            if inside(&id) {
                out.push(MemberRecord {
                    id: id.into_owned(),
                    incarnation: r.incarnation,
                    state: r.state().wire(),
                    meta: Box::default(),
                });
            }
        }
        // In identity order, as a whole digest is.
        out[start..].sort_unstable_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// A hash of what a digest sync compares (every member's identity,
    /// incarnation and state, this node's own record included), whatever
    /// the order: two nodes in agreement compute the same value. A sum of
    /// one mixed FNV-1a hash per record: a difference in any record changes
    /// it, except with negligible probability.
    ///
    /// Once this node has sent or read a summary, or restored a snapshot
    /// in version 4, the members' part is kept up to date by the table as
    /// records change (`Table::keep_view_sum`): a summary
    /// then costs no walk over 10,000 records. Below version 4 a snapshot
    /// still loads without hashing each record.
    pub(crate) fn view_hash(&self) -> u64 {
        record_hash(
            self.local().id(),
            self.local().incarnation(),
            self.own_state(),
        )
        .wrapping_add(self.members().view_sum())
    }

    /// [`Shared::view_hash`]'s terms summed by bucket: the sums a
    /// [`Message::Buckets`] carries.
    pub(crate) fn view_sums(&self) -> ViewSums {
        let mut v = self.members().view_sums().into_owned();
        v.add(
            self.local().id(),
            self.local().incarnation(),
            self.own_state(),
        );
        v
    }
}

/// Answering a peer's summary and bucket sums: whether the views agree,
/// and what to send when they do not (each answer spends a sync token).
impl<I: Identity> Recovery<I> {
    /// A peer's view hashes to `hash`: if this node's does not, the two
    /// sync (this node answers with its bucket sums, or starts a whole
    /// digest, spending a sync token).
    pub(crate) fn handle_summary(&mut self, sh: &mut Shared<I>, now: Time, from: &I, hash: u64) {
        sh.members_mut().keep_view_sum();
        let same = hash == sh.view_hash();
        if same {
            self.mark_synced();
        }
        if sh.isolation().phase().has_left() || same || !self.take_sync_token(sh, now) {
            return;
        }
        if sh.members().len() + 1 >= BUCKETED_FROM && sh.writes_v4_to(from) {
            if !sh.settled() {
                // News in flight here: the difference is likely it, and
                // gossip will settle it. A lasting one is met at a later
                // sync, once this node is quiet (in a storm of stalls,
                // answering every summary tripled the bytes sent).
                return;
            }
            let sums = Box::new(*sh.view_sums().sums());
            sh.send(
                from.clone(),
                Channel::Datagram,
                vec![Message::Buckets { sums }],
            );
        } else {
            sh.start_digest_sync(from.clone());
        }
    }

    /// A peer's view sums to `sums` by bucket (its answer to this node's
    /// summary): sends it a digest of the buckets that differ, if any
    /// still do (spending a sync token).
    pub(crate) fn handle_buckets(
        &mut self,
        sh: &mut Shared<I>,
        now: Time,
        from: &I,
        sums: &[u64; BUCKETS],
    ) {
        sh.members_mut().keep_view_sum();
        self.mark_synced();
        if sh.isolation().phase().has_left() || !sh.settled() {
            return;
        }
        let mine = sh.view_sums();
        let mut differ: Vec<usize> = (0..BUCKETS)
            .filter(|&b| mine.sums()[b] != sums[b])
            .collect();
        if differ.is_empty() || !self.take_sync_token(sh, now) {
            return;
        }
        // At most PART_BUCKETS of them, at random: a sync costs at most an
        // eighth of a whole digest, and what differs for long is met by
        // later syncs.
        if differ.len() > PART_BUCKETS {
            let (chosen, _) = differ.partial_shuffle(&mut sh.rng(), PART_BUCKETS);
            differ = chosen.to_vec();
        }
        let differ = differ.iter().fold(0u64, |m, b| m | 1 << b);
        if !sh.writes_v4_to(from) {
            // This node does not write version 4 to it yet: all of it.
            sh.start_digest_sync(from.clone());
            return;
        }
        sh.stats_mut().syncs += 1;
        let msg = Message::DigestPart {
            buckets: differ,
            reply: true,
            members: sh.digest_records_in(Some(differ)).into(),
        };
        sh.send(from.clone(), Channel::Stream, vec![msg]);
    }
}

/// Which of two records at the same incarnation is news: a suspicion over
/// an alive, a death over both, a departure over everything.
pub(crate) fn rank(s: WireState) -> u8 {
    match s {
        WireState::Alive => 0,
        WireState::Suspect => 1,
        WireState::Dead => 2,
        WireState::Left => 3,
    }
}
