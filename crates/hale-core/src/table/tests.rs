//! Tests of the member table.

use super::*;
use crate::wire::{DecodeError, Reader, WireState};

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct Num(u32);

impl Identity for Num {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Num(u32::from_le_bytes(r.array()?)))
    }
    fn encoded_len(&self) -> usize {
        4
    }
    fn dense_index(&self) -> Option<u32> {
        Some(self.0)
    }
    fn from_dense_index(index: u32) -> Option<Self> {
        Some(Num(index))
    }
}

#[test]
fn a_record_takes_twelve_bytes() {
    assert_eq!(std::mem::size_of::<Rec>(), 12);
}

#[test]
fn record_fields_do_not_overwrite_each_other() {
    let mut r = Rec::new(7, MemberState::Left);
    r.set_health(255);
    r.set(META_PENDING, true);
    r.set_heard_raw(HEARD_MASK);
    assert_eq!(r.state(), MemberState::Left);
    r.set_state(MemberState::Suspect);
    assert_eq!(
        (
            r.incarnation,
            r.state(),
            r.health(),
            r.has(META_PENDING),
            r.has(IN_WALK)
        ),
        (7, MemberState::Suspect, 255, true, false)
    );
    assert!(r.present());
    assert_eq!(r.heard_raw(), HEARD_MASK);
}

#[test]
fn last_heard_times_survive_a_move_of_the_epoch() {
    let mut t: Table<Num> = Table::new();
    for i in 0..3 {
        t.insert(
            &Num(i),
            Rec::new(0, MemberState::Alive),
            Box::new([]),
            Time::ZERO,
        );
    }
    let day = 86_400_000_000_000u64;
    t.set_heard(&Num(0), Time::from_nanos(day));
    t.set_heard(&Num(1), Time::from_nanos(30 * day));
    let late = Time::from_nanos(30 * day + 5);
    t.set_heard(&Num(2), late);
    let heard = |t: &Table<Num>, i| t.heard(t.get(&Num(i)).expect("known"));
    assert_eq!(heard(&t, 2), late);
    assert_eq!(heard(&t, 1), Time::from_nanos(30 * day));
    // Older than the epoch now: kept as the epoch, still heard.
    assert!(heard(&t, 0) > Time::from_nanos(day) && heard(&t, 0) < late);
    t.insert(
        &Num(3),
        Rec::new(0, MemberState::Alive),
        Box::new([]),
        Time::ZERO,
    );
    assert_eq!(heard(&t, 3), Time::ZERO);
}

#[test]
fn dense_and_keyed_members_are_stored_found_and_forgotten() {
    let mut t: Table<Num> = Table::new();
    let far = Num(DENSE_LIMIT + 7);
    for id in [Num(3), far.clone(), Num(0)] {
        t.insert(
            &id,
            Rec::new(id.0 % 5, MemberState::Alive),
            Box::new([]),
            Time::ZERO,
        );
    }
    assert_eq!(t.len(), 3);
    assert_eq!(
        t.get(&far).map(|r| r.incarnation),
        Some((DENSE_LIMIT + 7) % 5)
    );
    assert!(t.get(&Num(1)).is_none());
    t.set_meta(&far, Box::new([1, 2]));
    t.set_since(&Num(3), Time::from_secs(4));
    assert_eq!(t.meta(&far), &[1, 2]);
    assert_eq!(t.since(&Num(3)), Time::from_secs(4));
    assert_eq!(t.since(&Num(0)), Time::ZERO);
    let order: Vec<u32> = t.iter().map(|(id, _)| id.0).collect();
    assert_eq!(order, vec![0, 3, DENSE_LIMIT + 7]);
    t.remove(&far);
    t.remove(&Num(3));
    assert_eq!(t.len(), 1);
    assert!(t.get(&far).is_none());
    assert_eq!(t.meta(&far), &[] as &[u8]);
    // A slot freed by one member is not confused with another's.
    let other = Num(DENSE_LIMIT + 9);
    t.insert(
        &other,
        Rec::new(1, MemberState::Dead),
        Box::new([]),
        Time::ZERO,
    );
    assert!(t.get(&far).is_none());
    assert_eq!(t.view(&other).map(|m| m.state), Some(MemberState::Dead));
    assert_eq!(t.since(&Num(3)), Time::ZERO);
}

fn add(t: &mut Table<Num>, ids: std::ops::Range<u32>) {
    for i in ids {
        t.insert(
            &Num(i),
            Rec::new(0, MemberState::Alive),
            Box::new([]),
            Time::ZERO,
        );
    }
}

#[test]
fn a_table_loaded_with_n_members_takes_a_sixteenth_more_without_reallocating() {
    let mut t: Table<Num> = Table::new();
    t.reserve(10_000);
    add(&mut t, 0..10_000);
    let room = 10_000 + 10_000 / 16;
    assert_eq!(t.dense.capacity(), room);
    add(&mut t, 10_000..room as u32);
    assert_eq!(t.dense.capacity(), room);
    assert_eq!(t.dense_fresh.capacity(), room);
    assert_eq!(t.len(), room);
}

#[test]
fn a_full_table_that_learns_one_more_member_grows_by_a_sixteenth_not_double() {
    let mut t: Table<Num> = Table::new();
    t.dense.reserve_exact(10_000);
    t.dense_fresh.reserve_exact(10_000);
    add(&mut t, 0..10_000);
    assert_eq!(t.dense.capacity(), 10_000);
    add(&mut t, 10_000..10_001);
    let room = 10_001 + 10_001 / 16;
    assert_eq!(t.dense.capacity(), room);
    assert_eq!(t.dense_fresh.capacity(), room);
    // The next members up to that room take no new allocation.
    add(&mut t, 10_001..room as u32);
    assert_eq!(t.dense.capacity(), room);
    assert_eq!(t.len(), room);
    assert!(t.get(&Num(10_000)).is_some());
}

#[test]
fn pushing_onto_a_full_vector_leaves_room_for_a_sixteenth_more() {
    let mut v: Vec<u32> = Vec::with_capacity(3200);
    v.extend(0..3200);
    push_sparingly(&mut v, 7);
    assert_eq!(v.capacity(), 3200 + 200);
    assert_eq!(v.last(), Some(&7));
    let mut small: Vec<u32> = Vec::new();
    push_sparingly(&mut small, 1);
    assert_eq!(small.capacity(), 16);
}

#[test]
fn replay_state_is_stored_exactly_packed_or_not() {
    let mut t: Table<Num> = Table::new();
    let far = Num(DENSE_LIMIT + 1);
    for id in [Num(0), Num(1), Num(2), far.clone()] {
        t.insert(
            &id,
            Rec::new(0, MemberState::Alive),
            Box::new([]),
            Time::ZERO,
        );
    }
    let small = Freshness {
        known: true,
        generation: 1,
        offset_ms: 1,
        at: Time::from_nanos(123_456_789),
    };
    let big = Freshness {
        known: true,
        generation: 1_764_000_000_000,
        offset_ms: -40_000,
        at: Time::from_nanos(5),
    };
    assert_eq!(t.fresh(&Num(0)), Some(Freshness::default()));
    assert_eq!(t.fresh(&Num(9)), None);
    for (id, f) in [(Num(0), small), (Num(1), big), (far.clone(), small)] {
        t.set_fresh(&id, f, Some(f.at));
        assert_eq!(t.fresh(&id), Some(f));
    }
    assert_eq!(t.dense_fresh[0] & F_BIG, 0, "packed");
    // From the side map back to the packed form, and away on removal.
    t.set_fresh(&Num(1), small, Some(small.at));
    assert_eq!(t.fresh(&Num(1)), Some(small));
    assert!(!t.fresh_big.contains_key(&1));
    // Heard from without a judged packet (an ack through a relay): the
    // state keeps its own time.
    t.set_heard(&Num(1), Time::from_secs(9));
    assert_eq!(t.fresh(&Num(1)), Some(small));
    // Judged without being heard from (a late packet).
    let late = Freshness {
        at: Time::from_secs(10),
        ..small
    };
    t.set_fresh(&Num(1), late, None);
    assert_eq!(t.fresh(&Num(1)), Some(late));
    t.set_fresh(&Num(1), small, Some(small.at));
    t.set_fresh(&Num(2), big, None);
    t.remove(&Num(2));
    t.insert(
        &Num(2),
        Rec::new(0, MemberState::Alive),
        Box::new([]),
        Time::ZERO,
    );
    assert_eq!(t.fresh(&Num(2)), Some(Freshness::default()));
    // A move of the epoch keeps every value exact.
    let day = 86_400_000_000_000u64;
    t.set_heard(&Num(0), Time::from_nanos(40 * day));
    for id in [Num(0), Num(1), far] {
        assert_eq!(t.fresh(&id), Some(small));
    }
}

#[test]
fn watched_copies_and_the_kept_view_sum_follow_every_change_even_an_epoch_move_and_a_reused_slot() {
    let mut t: Table<Num> = Table::new();
    let far = Num(DENSE_LIMIT + 1);
    add(&mut t, 0..3);
    t.insert(
        &far,
        Rec::new(0, MemberState::Alive),
        Box::new([]),
        Time::ZERO,
    );
    t.keep_view_sum();
    let watched = [Num(1), far.clone(), Num(2)];
    t.watch(&watched);
    let agree = |t: &Table<Num>| {
        for (k, id) in watched.iter().enumerate() {
            assert_eq!(t.watched(k, id).copied(), t.get(id).copied(), "{id:?}");
        }
        let sum = t.iter().fold(0u64, |s, (id, r)| {
            s.wrapping_add(record_hash(&*id, r.incarnation, r.state().wire()))
        });
        assert_eq!(t.view_sum(), sum);
    };
    let day = 86_400_000_000_000u64;
    t.set_heard(&Num(1), Time::from_secs(5));
    t.update(&far, |r| r.set_health(3));
    agree(&t);
    // A clock 30 days ahead moves the epoch: every stored time shifts.
    t.set_heard(&Num(2), Time::from_nanos(30 * day));
    agree(&t);
    assert_eq!(
        t.heard(t.watched(2, &Num(2)).expect("known")),
        Time::from_nanos(30 * day)
    );
    t.set_state(&Num(1), MemberState::Suspect, Time::from_secs(6));
    t.update(&far, |r| r.incarnation = 4);
    agree(&t);
    // Forgotten, and its keyed slot taken by another member: the copy is
    // not read as the newcomer's.
    t.remove(&far);
    t.insert(
        &Num(DENSE_LIMIT + 2),
        Rec::new(9, MemberState::Dead),
        Box::new([]),
        Time::ZERO,
    );
    agree(&t);
    assert!(t.watched(1, &far).is_none());
    t.for_each_rec_mut(|r| r.set(IN_WALK, true));
    agree(&t);
}

#[test]
fn a_records_share_of_the_view_hash_is_the_mixed_fnv1a_of_its_identity_incarnation_and_state() {
    // A version 3 summary sums these shares: they must never change.
    let mut buf = Vec::new();
    Num(7).encode(&mut buf);
    buf.extend_from_slice(&9u32.to_le_bytes());
    buf.push(WireState::Suspect as u8);
    let mut z = crate::wire::fnv1a(&buf);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    assert_eq!(record_hash(&Num(7), 9, WireState::Suspect), z);
}

#[test]
fn a_change_of_one_record_moves_the_view_sum_of_its_bucket_alone() {
    let mut t: Table<Num> = Table::new();
    add(&mut t, 0..200);
    t.keep_view_sum();
    let before = t.view_sums().into_owned();
    t.set_state(&Num(17), MemberState::Suspect, Time::from_secs(1));
    let after = t.view_sums().into_owned();
    let b = bucket_of(&Num(17), &mut Vec::new());
    for k in 0..crate::wire::BUCKETS {
        assert_eq!(before.sums()[k] == after.sums()[k], k != b, "bucket {k}");
    }
    // The buckets spread the members: none holds more than a tenth.
    let mut counts = [0usize; crate::wire::BUCKETS];
    for i in 0..200 {
        counts[bucket_of(&Num(i), &mut Vec::new())] += 1;
    }
    assert!(counts.iter().all(|&c| c <= 20), "{counts:?}");
}
