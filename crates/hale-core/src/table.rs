//! The member table: what a node knows about each member, in 12 bytes a
//! member.
//!
//! A node of a 10,000-member cluster keeps 10,000 records, and a simulator
//! running 10,000 such nodes keeps 10^8: at the 100-odd bytes of a hash map
//! entry keyed by identity that was 11 GB. So the table is laid out for size:
//!
//! * **Slots, not keys.** Identities that offer a small dense index
//!   ([`Identity::dense_index`], such as the simulator's numbered nodes) are
//!   stored at that index in a plain vector, with no key and no hashing; any
//!   other identity (the agent's name and address) is looked up once in a
//!   hash map that gives its slot in a second vector.
//! * **Compact records.** A [`Rec`] (12 bytes) holds only what changes
//!   with every packet or is read on every probe: when the member was last
//!   heard from, its incarnation, state, advertised health and two flags.
//! * **Rare fields aside.** Metadata is stored only when non-empty, and the
//!   time a member entered its state only when it is not [`Time::ZERO`]
//!   (a member loaded from a snapshot at time zero that never changed state
//!   has none). The monitoring ring position is a hash of the identity,
//!   recomputed when needed (`ring_position`): monitors change rarely.
//!
//! Iteration visits dense slots in index order, then the others in slot
//! order; callers that need an order independent of history sort.

use std::borrow::Cow;
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::freshness::Freshness;
use crate::identity::Identity;
use crate::member::MemberState;
use crate::time::Time;

/// A hash map with the fast, deterministic Fx hasher (no OS randomness).
pub(crate) type FxMap<K, V> = HashMap<K, V, FxBuildHasher>;

/// Dense indices at or above this are stored like any other identity, so
/// that a forged index cannot make a node allocate a huge vector (at most
/// 16 MB of records).
pub(crate) const DENSE_LIMIT: u32 = 1 << 20;

/// The member is in the current round of the probe walk.
pub(crate) const IN_WALK: u8 = 1;
/// The incarnation was raised by a packet header, so the metadata of that
/// incarnation has not been seen yet.
pub(crate) const META_PENDING: u8 = 2;

/// Bits of a record's last-heard time: nanoseconds after the table's epoch.
const HEARD_BITS: u32 = 51;
const HEARD_MASK: u64 = (1 << HEARD_BITS) - 1;
const STATE_SHIFT: u32 = HEARD_BITS;
const FLAGS_SHIFT: u32 = STATE_SHIFT + 2;
const PRESENT: u64 = 1 << (FLAGS_SHIFT + 2);
const HEALTH_SHIFT: u32 = 56;

/// Packed replay-protection state (16 bits; its time is the last-heard time).
const F_KNOWN: u16 = 1;
const F_BIG: u16 = 2;
const F_GEN_SHIFT: u32 = 2;
const F_GEN_MAX: u64 = 31;
const F_OFF_SHIFT: u32 = 7;
const F_OFF_MAX: u64 = 63;

/// One member's record, in 12 bytes: its incarnation, and packed in one
/// 64-bit word (kept as two 32-bit halves so that the record is 4-byte
/// aligned): when this node last heard from it (51 bits of nanoseconds
/// after the table's epoch, see [`Table::set_heard`]), its state (2 bits),
/// the flags [`IN_WALK`] and [`META_PENDING`], whether the slot is in use,
/// and the local health score it last advertised (8 bits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rec {
    /// Its incarnation.
    pub(crate) incarnation: u32,
    word: [u32; 2],
}

impl Rec {
    /// A record for a member just learned of.
    pub(crate) fn new(incarnation: u32, state: MemberState) -> Rec {
        let mut r = Rec {
            incarnation,
            word: [0; 2],
        };
        r.put(r.get() | PRESENT);
        r.set_state(state);
        r
    }

    fn get(&self) -> u64 {
        u64::from(self.word[0]) | (u64::from(self.word[1]) << 32)
    }

    fn put(&mut self, w: u64) {
        self.word = [w as u32, (w >> 32) as u32];
    }

    fn present(&self) -> bool {
        self.get() & PRESENT != 0
    }

    /// Its state.
    pub(crate) fn state(&self) -> MemberState {
        match (self.get() >> STATE_SHIFT) & 3 {
            0 => MemberState::Alive,
            1 => MemberState::Suspect,
            2 => MemberState::Dead,
            _ => MemberState::Left,
        }
    }

    /// Sets its state.
    pub(crate) fn set_state(&mut self, s: MemberState) {
        let code: u64 = match s {
            MemberState::Alive => 0,
            MemberState::Suspect => 1,
            MemberState::Dead => 2,
            MemberState::Left => 3,
        };
        self.put((self.get() & !(3 << STATE_SHIFT)) | (code << STATE_SHIFT));
    }

    /// The local health score it last advertised in a packet header.
    pub(crate) fn health(&self) -> u8 {
        (self.get() >> HEALTH_SHIFT) as u8
    }

    /// Records the local health score it advertised.
    pub(crate) fn set_health(&mut self, h: u8) {
        self.put((self.get() & !(0xff << HEALTH_SHIFT)) | (u64::from(h) << HEALTH_SHIFT));
    }

    /// Whether `flag` is set.
    pub(crate) fn has(&self, flag: u8) -> bool {
        (self.get() >> FLAGS_SHIFT) & u64::from(flag) != 0
    }

    /// Sets or clears `flag`.
    pub(crate) fn set(&mut self, flag: u8, on: bool) {
        let bit = u64::from(flag) << FLAGS_SHIFT;
        let w = self.get();
        self.put(if on { w | bit } else { w & !bit });
    }

    fn heard_raw(&self) -> u64 {
        self.get() & HEARD_MASK
    }

    fn set_heard_raw(&mut self, raw: u64) {
        debug_assert!(raw <= HEARD_MASK);
        self.put((self.get() & !HEARD_MASK) | raw);
    }
}

/// Resizes `v` to `len` (at least its length), filling with `fill`. When
/// that needs a new allocation, it leaves room for a sixteenth more (at
/// least 16), not twice as much as `Vec` would: a node of a 10,000-member
/// cluster that learns of one new member must not double its table (in a
/// simulator of 10,000 nodes, 1.4 GB for 50 joins). Still amortised: each
/// reallocation is followed by at least `len / 16` pushes without one.
pub(crate) fn grow_to<T: Clone>(v: &mut Vec<T>, len: usize, fill: T) {
    if len > v.capacity() {
        let room = len + (len / 16).max(16);
        v.reserve_exact(room - v.len());
    }
    v.resize(len.max(v.len()), fill);
}

/// `n` and a sixteenth more: the room a loaded snapshot of `n` members
/// reserves for members that join later. Reallocating a full table when
/// one joins leaves the old block free but resident; in a simulator whose
/// 10,000 nodes all learn of the same joins, that fragmentation alone was
/// gigabytes. Pages reserved and never written cost no memory.
pub(crate) fn headroom(n: usize) -> usize {
    n + n / 16
}

/// Pushes `x` onto `v`, growing it by a sixteenth (see [`grow_to`]) when full.
pub(crate) fn push_sparingly<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 16).max(16));
    }
    v.push(x);
}

/// A slot: a dense index below [`DENSE_LIMIT`], or `DENSE_LIMIT + k` for the
/// `k`-th entry of the keyed part.
type Slot = u32;

/// Every member a node knows of, this node excluded.
///
/// Invariant: `live` and `suspects` count the records that are live and
/// suspected; a record changes state only through [`Table::set_state`].
#[derive(Debug)]
pub(crate) struct Table<I> {
    dense: Vec<Rec>,
    /// Replay-protection state of dense slots, packed (see [`Table::fresh`]).
    dense_fresh: Vec<u16>,
    /// Replay-protection state that does not fit the packed form, and that
    /// of every keyed slot.
    fresh_big: FxMap<Slot, Freshness>,
    keyed: Vec<Option<(I, Rec)>>,
    /// Last-heard times are stored as offsets from this.
    epoch: Time,
    index: FxMap<I, Slot>,
    free: Vec<Slot>,
    since: FxMap<Slot, Time>,
    meta: FxMap<Slot, Box<[u8]>>,
    /// Copies of the ring neighbours' records (`watch.rs`).
    watch: Watch<I, Rec>,
    /// The per-bucket sums of [`record_hash`] over every record
    /// (`view.rs`), once something asked to keep them
    /// ([`Table::keep_view_sum`]): a snapshot of 10,000 loads without
    /// hashing each record.
    view: Option<ViewSums>,
    len: usize,
    live: usize,
    suspects: usize,
}

impl<I: Identity> Table<I> {
    pub(crate) fn new() -> Self {
        Table {
            dense: Vec::new(),
            dense_fresh: Vec::new(),
            fresh_big: FxMap::default(),
            keyed: Vec::new(),
            epoch: Time::ZERO,
            index: FxMap::default(),
            free: Vec::new(),
            since: FxMap::default(),
            meta: FxMap::default(),
            watch: Watch::default(),
            view: None,
            len: 0,
            live: 0,
            suspects: 0,
        }
    }

    /// Alive or suspected members.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Live members that are not suspected.
    pub(crate) fn alive(&self) -> usize {
        self.live - self.suspects
    }

    /// Moves a known `id` to `state` at `now`; its previous state.
    pub(crate) fn set_state(
        &mut self,
        id: &I,
        state: MemberState,
        now: Time,
    ) -> Option<MemberState> {
        let was = self.update(id, |m| {
            let was = m.state();
            m.set_state(state);
            was
        })?;
        self.set_since(id, now);
        let suspect = |s: MemberState| usize::from(s == MemberState::Suspect);
        self.suspects = self.suspects + suspect(state) - suspect(was);
        self.live = self.live + usize::from(state.is_live()) - usize::from(was.is_live());
        Some(was)
    }

    /// Members known.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `n` more members without reallocating as they
    /// arrive, and for a sixteenth more ([`headroom`]) that join later.
    pub(crate) fn reserve(&mut self, n: usize) {
        if I::from_dense_index(0).is_some() {
            self.dense.reserve(headroom(n));
            self.dense_fresh.reserve(headroom(n));
        } else {
            self.keyed.reserve(n);
            self.index.reserve(n);
        }
    }

    fn slot(&self, id: &I) -> Option<Slot> {
        match id.dense_index() {
            Some(d) if d < DENSE_LIMIT => self
                .dense
                .get(d as usize)
                .is_some_and(Rec::present)
                .then_some(d),
            _ => self.index.get(id).copied(),
        }
    }

    fn rec(&self, slot: Slot) -> Option<&Rec> {
        if slot < DENSE_LIMIT {
            self.dense.get(slot as usize).filter(|r| r.present())
        } else {
            self.keyed
                .get((slot - DENSE_LIMIT) as usize)?
                .as_ref()
                .map(|(_, r)| r)
        }
    }

    /// The record of `id`, if known.
    pub(crate) fn get(&self, id: &I) -> Option<&Rec> {
        match id.dense_index() {
            Some(d) if d < DENSE_LIMIT => self.dense.get(d as usize).filter(|r| r.present()),
            _ => self.rec(*self.index.get(id)?),
        }
    }

    /// Changes the record of `id` with `f`, if known; what `f` returns.
    pub(crate) fn update<R>(&mut self, id: &I, f: impl FnOnce(&mut Rec) -> R) -> Option<R> {
        let slot = self.slot(id)?;
        let r = self.rec_mut(slot)?;
        let was = *r;
        let out = f(r);
        let rec = *r;
        self.watch.refresh(slot, rec);
        if let Some(view) = self.view.as_mut() {
            if (was.incarnation, was.state()) != (rec.incarnation, rec.state()) {
                view.sub(id, was.incarnation, was.state().wire());
                view.add(id, rec.incarnation, rec.state().wire());
            }
        }
        Some(out)
    }

    /// The sum of [`record_hash`] over every member's identity,
    /// incarnation and state: the members' part of
    /// [`crate::Node::view_hash`].
    pub(crate) fn view_sum(&self) -> u64 {
        self.view_sums().total()
    }

    /// The members' view sums by bucket (`view.rs`): read from the kept
    /// sums if [`Table::keep_view_sum`] was called, else summed here.
    pub(crate) fn view_sums(&self) -> Cow<'_, ViewSums> {
        let sum_all = || {
            let mut v = ViewSums::default();
            for (id, r) in self.iter() {
                v.add(&*id, r.incarnation, r.state().wire());
            }
            v
        };
        match &self.view {
            Some(v) => {
                debug_assert_eq!(*v, sum_all(), "the kept view sums differ from the records'");
                Cow::Borrowed(v)
            }
            None => Cow::Owned(sum_all()),
        }
    }

    /// Keeps `sums` as [`Table::view_sums`] from now on, which the caller
    /// knows equal the records' (debug builds check it on every read).
    pub(crate) fn take_view_sums(&mut self, sums: ViewSums) {
        self.view = Some(sums);
    }

    /// Keeps [`Table::view_sums`] from now on, updated as records change.
    pub(crate) fn keep_view_sum(&mut self) {
        if self.view.is_none() {
            self.view = Some(self.view_sums().into_owned());
        }
    }

    /// Reads `id`'s record and packed replay state, for cache warming
    /// (`warm.rs`): the value means nothing.
    pub(crate) fn warm(&self, id: &I) -> u64 {
        match id.dense_index() {
            Some(d) if d < DENSE_LIMIT => {
                let d = d as usize;
                let r = self.dense.get(d).map_or(0, |r| r.get());
                r ^ u64::from(self.dense_fresh.get(d).copied().unwrap_or(0))
            }
            _ => 0,
        }
    }

    /// Whether `id` is known.
    pub(crate) fn contains(&self, id: &I) -> bool {
        self.get(id).is_some()
    }

    /// Adds `id`, which must not be known yet, with its metadata and the
    /// time it entered its state.
    pub(crate) fn insert(&mut self, id: &I, rec: Rec, meta: Box<[u8]>, since: Time) {
        debug_assert!(!self.contains(id), "member inserted twice");
        let slot = match id.dense_index() {
            Some(d) if d < DENSE_LIMIT => {
                let i = d as usize;
                if self.dense.len() <= i {
                    grow_to(&mut self.dense, i + 1, Rec::default());
                    grow_to(&mut self.dense_fresh, i + 1, 0);
                }
                self.dense[i] = rec;
                self.dense_fresh[i] = 0;
                d
            }
            _ => {
                let slot = match self.free.pop() {
                    Some(s) => {
                        self.keyed[(s - DENSE_LIMIT) as usize] = Some((id.clone(), rec));
                        s
                    }
                    None => {
                        self.keyed.push(Some((id.clone(), rec)));
                        DENSE_LIMIT + (self.keyed.len() - 1) as Slot
                    }
                };
                self.index.insert(id.clone(), slot);
                slot
            }
        };
        self.watch.refresh(slot, rec);
        if let Some(view) = self.view.as_mut() {
            view.add(id, rec.incarnation, rec.state().wire());
        }
        self.len += 1;
        self.put_meta(slot, meta);
        self.put_since(slot, since);
    }

    /// Forgets `id`.
    pub(crate) fn remove(&mut self, id: &I) {
        let Some(slot) = self.slot(id) else {
            return;
        };
        if let Some(r) = self.rec(slot).copied() {
            if let Some(view) = self.view.as_mut() {
                view.sub(id, r.incarnation, r.state().wire());
            }
        }
        if slot < DENSE_LIMIT {
            self.dense[slot as usize] = Rec::default();
        } else {
            self.index.remove(id);
            self.keyed[(slot - DENSE_LIMIT) as usize] = None;
            self.free.push(slot);
        }
        if slot < DENSE_LIMIT {
            self.dense_fresh[slot as usize] = 0;
        }
        self.watch.drop_slot(slot);
        self.fresh_big.remove(&slot);
        self.meta.remove(&slot);
        self.since.remove(&slot);
        self.len -= 1;
    }

    /// When this node last heard from the member of record `r`
    /// ([`Time::ZERO`]: never).
    pub(crate) fn heard(&self, r: &Rec) -> Time {
        match r.heard_raw() {
            0 => Time::ZERO,
            raw => Time::from_nanos(self.epoch.as_nanos() + raw),
        }
    }

    /// Records when this node last heard from a known `id`.
    ///
    /// Times are kept as 51-bit offsets from an epoch (26 days of
    /// nanoseconds). When a time does not fit, the epoch moves to 13 days
    /// before it, and any older time is kept as the new epoch: every
    /// window the protocol compares last-heard times with is far shorter,
    /// so no decision changes. (A simulator run never gets there.)
    pub(crate) fn set_heard(&mut self, id: &I, t: Time) {
        let Some(slot) = self.slot(id) else {
            return;
        };
        // A packed replay state's time is this member's last-heard time:
        // keep it whole before that moves.
        if slot < DENSE_LIMIT && self.heard_raw_for(t) != self.rec(slot).map(Rec::heard_raw) {
            self.unpack_to_map(slot);
        }
        self.put_heard(slot, t);
    }

    /// The raw last-heard value `t` would be stored as (epoch unchanged), or
    /// None when storing it moves the epoch or ignores it.
    fn heard_raw_for(&self, t: Time) -> Option<u64> {
        if t == Time::ZERO {
            return Some(0);
        }
        let d = t.as_nanos().checked_sub(self.epoch.as_nanos())?;
        (d <= HEARD_MASK).then_some(d.max(1))
    }

    fn heard_at(&self, slot: Slot) -> Time {
        self.rec(slot).map_or(Time::ZERO, |r| self.heard(r))
    }

    fn put_heard(&mut self, slot: Slot, t: Time) {
        if t != Time::ZERO && t.as_nanos() < self.epoch.as_nanos() {
            return; // Older than anything the epoch still tells apart.
        }
        if t.as_nanos().saturating_sub(self.epoch.as_nanos()) > HEARD_MASK {
            self.rebase(Time::from_nanos(t.as_nanos() - (HEARD_MASK >> 1)));
        }
        let raw = self.heard_raw_for(t).unwrap_or(1);
        if let Some(r) = self.rec_mut(slot) {
            r.set_heard_raw(raw);
            let rec = *r;
            self.watch.refresh(slot, rec);
        }
    }

    fn rec_mut(&mut self, slot: Slot) -> Option<&mut Rec> {
        if slot < DENSE_LIMIT {
            self.dense.get_mut(slot as usize).filter(|r| r.present())
        } else {
            self.keyed
                .get_mut((slot - DENSE_LIMIT) as usize)?
                .as_mut()
                .map(|(_, r)| r)
        }
    }

    fn rebase(&mut self, epoch: Time) {
        let old = self.epoch.as_nanos();
        let new = epoch.as_nanos();
        // Packed replay states of members whose time is about to be clamped
        // are kept whole first.
        for slot in 0..self.dense_fresh.len() as Slot {
            let raw = self.dense[slot as usize].heard_raw();
            if raw != 0 && old + raw < new {
                self.unpack_to_map(slot);
            }
        }
        let shift = |r: &mut Rec| {
            let raw = r.heard_raw();
            if raw != 0 {
                r.set_heard_raw((old + raw).saturating_sub(new).max(1));
            }
        };
        self.for_each_rec_mut(shift);
        self.epoch = epoch;
    }

    /// The replay-protection state of a known `id`.
    ///
    /// Dense slots keep it packed in 16 bits when it fits, as it does in a
    /// simulator nearly always: a generation under 32, a clock offset of 0
    /// to 63 ms, and a time equal to the member's last-heard time (a packet
    /// proves life and is judged fresh at the same instant). Anything else is
    /// kept whole in a side map, and a packed state is moved there before
    /// the last-heard time changes without it. Either way the value read is
    /// exactly the one stored.
    pub(crate) fn fresh(&self, id: &I) -> Option<Freshness> {
        let slot = self.slot(id)?;
        Some(if slot < DENSE_LIMIT {
            self.unpack(slot)
        } else {
            self.fresh_big.get(&slot).copied().unwrap_or_default()
        })
    }

    /// Stores the replay-protection state of a known `id`, and first its
    /// last-heard time if `heard` is given (a current packet).
    pub(crate) fn set_fresh(&mut self, id: &I, f: Freshness, heard: Option<Time>) {
        let Some(slot) = self.slot(id) else {
            return;
        };
        if let Some(t) = heard {
            self.put_heard(slot, t);
        }
        if slot >= DENSE_LIMIT {
            self.fresh_big.insert(slot, f);
            return;
        }
        let word = if f == Freshness::default() {
            Some(0)
        } else if f.known
            && f.generation <= F_GEN_MAX
            && (0..=F_OFF_MAX as i64).contains(&f.offset_ms)
            && f.at == self.heard_at(slot)
        {
            Some(
                F_KNOWN
                    | ((f.generation as u16) << F_GEN_SHIFT)
                    | ((f.offset_ms as u16) << F_OFF_SHIFT),
            )
        } else {
            None
        };
        let i = slot as usize;
        match word {
            Some(w) => {
                if self.dense_fresh[i] & F_BIG != 0 {
                    self.fresh_big.remove(&slot);
                }
                self.dense_fresh[i] = w;
            }
            None => {
                self.dense_fresh[i] = F_BIG;
                self.fresh_big.insert(slot, f);
            }
        }
    }

    fn unpack(&self, slot: Slot) -> Freshness {
        let w = self.dense_fresh[slot as usize];
        if w & F_BIG != 0 {
            return self.fresh_big.get(&slot).copied().unwrap_or_default();
        }
        if w & F_KNOWN == 0 {
            return Freshness::default();
        }
        Freshness {
            known: true,
            generation: u64::from((w >> F_GEN_SHIFT) & F_GEN_MAX as u16),
            offset_ms: i64::from((w >> F_OFF_SHIFT) & F_OFF_MAX as u16),
            at: self.heard_at(slot),
        }
    }

    /// Moves a dense slot's packed, known replay state to the side map.
    fn unpack_to_map(&mut self, slot: Slot) {
        let w = self.dense_fresh[slot as usize];
        if w & F_KNOWN != 0 && w & F_BIG == 0 {
            let f = self.unpack(slot);
            self.fresh_big.insert(slot, f);
            self.dense_fresh[slot as usize] = F_BIG;
        }
    }

    /// The metadata of `id` (empty if unknown).
    pub(crate) fn meta(&self, id: &I) -> &[u8] {
        self.slot(id)
            .and_then(|s| self.meta.get(&s))
            .map_or(&[], |m| &**m)
    }

    /// Replaces the metadata of a known `id`.
    pub(crate) fn set_meta(&mut self, id: &I, meta: Box<[u8]>) {
        if let Some(slot) = self.slot(id) {
            self.put_meta(slot, meta);
        }
    }

    fn put_meta(&mut self, slot: Slot, meta: Box<[u8]>) {
        if meta.is_empty() {
            if !self.meta.is_empty() {
                self.meta.remove(&slot);
            }
        } else {
            self.meta.insert(slot, meta);
        }
    }

    /// When `id` entered its current state.
    pub(crate) fn since(&self, id: &I) -> Time {
        self.slot(id).map_or(Time::ZERO, |s| self.since_of(s))
    }

    fn since_of(&self, slot: Slot) -> Time {
        self.since.get(&slot).copied().unwrap_or(Time::ZERO)
    }

    /// Records when a known `id` entered its current state.
    pub(crate) fn set_since(&mut self, id: &I, t: Time) {
        if let Some(slot) = self.slot(id) {
            self.put_since(slot, t);
        }
    }

    fn put_since(&mut self, slot: Slot, t: Time) {
        if t == Time::ZERO {
            if !self.since.is_empty() {
                self.since.remove(&slot);
            }
        } else {
            self.since.insert(slot, t);
        }
    }

    /// Every member: its slot, identity and record.
    fn entries(&self) -> impl Iterator<Item = (Slot, Cow<'_, I>, &Rec)> {
        let dense = self.dense.iter().enumerate().filter_map(|(i, r)| {
            let r = r.present().then_some(r)?;
            let i = i as Slot;
            let id = I::from_dense_index(i).expect("a dense index names an identity");
            Some((i, Cow::Owned(id), r))
        });
        let keyed = self.keyed.iter().enumerate().filter_map(|(k, e)| {
            let (id, r) = e.as_ref()?;
            Some((DENSE_LIMIT + k as Slot, Cow::Borrowed(id), r))
        });
        dense.chain(keyed)
    }

    /// Every member: its identity and record.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Cow<'_, I>, &Rec)> {
        self.entries().map(|(_, id, r)| (id, r))
    }

    /// Every member: its identity, record and metadata.
    pub(crate) fn iter_meta(&self) -> impl Iterator<Item = (Cow<'_, I>, &Rec, &[u8])> {
        self.entries().map(|(slot, id, r)| {
            let meta = self.meta.get(&slot).map_or(&[] as &[u8], |m| &**m);
            (id, r, meta)
        })
    }

    /// Changes every record with `f` (identities not needed), which must
    /// not change an incarnation or a state (the view sum is not updated).
    pub(crate) fn for_each_rec_mut(&mut self, f: impl FnMut(&mut Rec)) {
        let dense = self.dense.iter_mut().filter(|r| r.present());
        let keyed = self
            .keyed
            .iter_mut()
            .filter_map(|e| e.as_mut().map(|(_, r)| r));
        dense.chain(keyed).for_each(f);
        self.refresh_watched();
    }

    /// Every record.
    pub(crate) fn recs(&self) -> impl Iterator<Item = &Rec> {
        let dense = self.dense.iter().filter(|r| r.present());
        let keyed = self.keyed.iter().filter_map(|e| e.as_ref().map(|(_, r)| r));
        dense.chain(keyed)
    }

    /// The public view of `id`, if known.
    pub(crate) fn view(&self, id: &I) -> Option<crate::member::Member<I>> {
        let slot = self.slot(id)?;
        let r = self.rec(slot)?;
        Some(self.view_of(id.clone(), slot, r))
    }

    /// The public view of every member.
    pub(crate) fn views(&self) -> impl Iterator<Item = crate::member::Member<I>> + '_ {
        self.entries()
            .map(|(slot, id, r)| self.view_of(id.into_owned(), slot, r))
    }

    fn view_of(&self, id: I, slot: Slot, r: &Rec) -> crate::member::Member<I> {
        crate::member::Member {
            id,
            incarnation: r.incarnation,
            state: r.state(),
            health: r.health(),
            meta: self.meta.get(&slot).cloned().unwrap_or_default(),
            last_heard: self.heard(r),
            state_since: self.since_of(slot),
        }
    }
}

#[cfg(test)]
mod tests;
mod view;
mod watch;
mod watched;

pub(crate) use view::{bucket_of, record_hash, ViewSums};
use watch::Watch;
