//! Turning a scenario into the timed actions of one run.

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use hale_core::Time;

use super::{invalid, Dur, Scenario, ScenarioError, Step, StepKind};
use crate::engine::Action;

/// After a temporary fault ends, its node is left alone this long before a
/// random pick may choose it again (time to refute and settle).
const SETTLE: Duration = Duration::from_secs(60);

/// The timed actions of one run, every random choice drawn from its seed.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Actions in time order (equal times in file order).
    pub actions: Vec<(Time, Action)>,
    /// Application traffic rate from each time on (the first at time zero).
    pub traffic: Vec<(Time, f64)>,
    /// When each fault step (anything but traffic) takes effect.
    pub fault_times: Vec<Time>,
    /// End of the chaos phase.
    pub chaos_end: Time,
    /// End of the run.
    pub end: Time,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Life {
    Up,
    Crashed,
    Left,
}

struct Planner {
    rng: Xoshiro256PlusPlus,
    life: Vec<Life>,
    busy_until: Vec<Time>,
    out: Vec<(Time, Action)>,
    chaos_end: Time,
    slowed: Vec<u32>,
    baseline_loss: f64,
}

impl Scenario {
    /// The actions of the run with `seed`: which nodes crash, stall or join
    /// when. Equal seeds give equal plans.
    pub fn plan(&self, seed: u64) -> Result<Plan, ScenarioError> {
        let chaos_end = self.chaos_end();
        let mut p = Planner {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5ce4_a410_77a1_0001),
            life: vec![Life::Up; self.nodes as usize],
            busy_until: vec![Time::ZERO; self.nodes as usize],
            out: Vec::new(),
            chaos_end: Time::ZERO + chaos_end,
            slowed: Vec::new(),
            baseline_loss: self.network.loss,
        };
        let mut order: Vec<(usize, &Step)> = self.steps.iter().enumerate().collect();
        order.sort_by_key(|(i, s)| (s.at, *i));
        let mut fault_times = Vec::new();
        for (i, step) in order {
            fault_times.push(step.at.as_time());
            p.step(&format!("step[{i}]"), step)?;
        }
        if !self.heal_len().is_zero() {
            let t = p.chaos_end;
            fault_times.push(t);
            p.out.push((t, Action::Heal));
            p.out.push((t, Action::Loss(p.baseline_loss)));
            for i in std::mem::take(&mut p.slowed) {
                p.out.push((t, Action::Slow(i, Duration::ZERO)));
            }
        }
        let mut traffic = vec![(Time::ZERO, self.traffic.rate)];
        for pt in &self.traffic.schedule {
            traffic.push((pt.at.as_time(), pt.rate));
        }
        if let Some(s) = &self.traffic.sweep {
            for (k, r) in s.rates.iter().enumerate() {
                traffic.push((s.start.as_time() + s.hold.get() * k as u32, *r));
            }
        }
        traffic.sort_by_key(|a| a.0);
        for &(t, r) in traffic.iter().skip(1) {
            p.out.push((t, Action::Traffic(r)));
        }
        p.out.sort_by_key(|(t, _)| *t);
        fault_times.sort();
        Ok(Plan {
            actions: p.out,
            traffic,
            fault_times,
            chaos_end: p.chaos_end,
            end: self.duration.as_time(),
        })
    }
}

impl Planner {
    fn n(&self) -> u32 {
        self.life.len() as u32
    }

    fn targets(&mut self, key: &str, s: &Step, at: Time) -> Result<Vec<u32>, ScenarioError> {
        let n = self.n();
        let explicit = match (&s.node, &s.nodes) {
            (Some(i), _) => Some((format!("{key}.node"), vec![*i])),
            (None, Some(v)) => Some((format!("{key}.nodes"), v.clone())),
            _ => None,
        };
        if let Some((k, ids)) = explicit {
            if let Some(bad) = ids.iter().find(|&&i| i >= n) {
                return Err(invalid(
                    k,
                    format!(
                        "node {bad} does not exist at {} (the cluster has {n})",
                        s.at
                    ),
                ));
            }
            return Ok(ids);
        }
        let pool: Vec<u32> = if s.action == StepKind::Restart {
            (0..n)
                .filter(|&i| self.life[i as usize] == Life::Crashed)
                .collect()
        } else {
            (0..n)
                .filter(|&i| self.life[i as usize] == Life::Up && self.busy_until[i as usize] <= at)
                .collect()
        };
        let (k, want) = match (s.count, s.share) {
            (Some(c), _) => (format!("{key}.count"), c as usize),
            (None, Some(f)) => {
                let up = self.life.iter().filter(|l| **l == Life::Up).count();
                (
                    format!("{key}.share"),
                    ((f * up as f64).round() as usize).max(1),
                )
            }
            (None, None) => unreachable!("validated: node steps have a target"),
        };
        if want > pool.len() {
            return Err(invalid(
                k,
                format!(
                    "{want} node(s) wanted at {} but only {} are available for {}",
                    s.at,
                    pool.len(),
                    s.action.as_str()
                ),
            ));
        }
        let mut pool = pool;
        pool.shuffle(&mut self.rng);
        pool.truncate(want);
        pool.sort_unstable();
        Ok(pool)
    }

    fn busy(&mut self, i: u32, until: Time) {
        let b = &mut self.busy_until[i as usize];
        *b = (*b).max(until);
    }

    fn step(&mut self, key: &str, s: &Step) -> Result<(), ScenarioError> {
        let at = s.at.as_time();
        let dur = s.duration.map(Dur::get);
        let until_end = |d: Option<Duration>| d.map_or(Time::NEVER, |d| at + d + SETTLE);
        match s.action {
            StepKind::Join => {
                for _ in 0..s.count.unwrap_or(1) {
                    let i = self.n();
                    self.life.push(Life::Up);
                    self.busy_until.push(at + SETTLE);
                    self.out.push((at, Action::Join(i)));
                }
                return Ok(());
            }
            StepKind::Loss => {
                let v = s.value.unwrap_or(0.0);
                self.out.push((at, Action::Loss(v)));
                if let Some(d) = dur {
                    self.out.push((at + d, Action::Loss(self.baseline_loss)));
                }
                return Ok(());
            }
            StepKind::Heal => {
                self.out.push((at, Action::Heal));
                return Ok(());
            }
            StepKind::Partition => {
                let groups = match (&s.groups, s.sides) {
                    (Some(g), _) => {
                        let n = self.n();
                        if let Some(bad) = g.iter().flatten().find(|&&i| i >= n) {
                            return Err(invalid(
                                format!("{key}.groups"),
                                format!("node {bad} does not exist (the cluster has {n})"),
                            ));
                        }
                        g.clone()
                    }
                    (None, Some(sides)) => {
                        let mut all: Vec<u32> = (0..self.n()).collect();
                        all.shuffle(&mut self.rng);
                        let per = all.len().div_ceil(sides as usize).max(1);
                        all.chunks(per).map(|c| c.to_vec()).collect()
                    }
                    (None, None) => {
                        let group = self.targets(key, s, at)?;
                        for &i in &group {
                            self.busy(i, until_end(dur));
                        }
                        vec![group]
                    }
                };
                self.out.push((at, Action::Partition(groups)));
                if let Some(d) = dur {
                    self.out.push((at + d, Action::Partition(Vec::new())));
                }
                return Ok(());
            }
            _ => {}
        }
        let targets = self.targets(key, s, at)?;
        for i in targets {
            match s.action {
                StepKind::Crash | StepKind::Kill => {
                    self.life[i as usize] = Life::Crashed;
                    self.busy(i, Time::NEVER);
                    let act = if s.action == StepKind::Kill {
                        Action::Kill(i)
                    } else {
                        Action::Crash(i)
                    };
                    self.out.push((at, act));
                }
                StepKind::Leave => {
                    self.life[i as usize] = Life::Left;
                    self.busy(i, Time::NEVER);
                    self.out.push((at, Action::Leave(i)));
                }
                StepKind::Restart => {
                    if self.life[i as usize] != Life::Crashed {
                        return Err(invalid(
                            format!("{key}.node"),
                            format!("node {i} is not crashed at {}", s.at),
                        ));
                    }
                    self.life[i as usize] = Life::Up;
                    self.busy_until[i as usize] = at + SETTLE;
                    self.out.push((at, Action::Restart(i)));
                }
                StepKind::Freeze | StepKind::Stall => {
                    let d = dur.unwrap_or_default();
                    let make = |t: Time| {
                        if s.action == StepKind::Freeze {
                            (t, Action::Freeze(i, d))
                        } else {
                            (t, Action::Stall(i, d))
                        }
                    };
                    match s.every {
                        None => {
                            self.busy(i, at + d + SETTLE);
                            self.out.push(make(at));
                        }
                        Some(every) => {
                            let until = s.until.map_or(self.chaos_end, Dur::as_time);
                            self.busy(i, until + d + SETTLE);
                            let every = every.get().as_secs_f64();
                            let mut t =
                                at + Duration::from_secs_f64(self.rng.random_range(0.0..every));
                            while t < until {
                                self.out.push(make(t));
                                let gap = self.rng.random_range(0.5 * every..1.5 * every);
                                t = t + Duration::from_secs_f64(gap);
                            }
                        }
                    }
                }
                StepKind::Slow => {
                    let delay = s.delay.map_or(Duration::ZERO, Dur::get);
                    self.busy(i, until_end(dur));
                    self.out.push((at, Action::Slow(i, delay)));
                    match dur {
                        Some(d) => self.out.push((at + d, Action::Slow(i, Duration::ZERO))),
                        None => self.slowed.push(i),
                    }
                }
                StepKind::IngressLoss
                | StepKind::EgressLoss
                | StepKind::BlockIngress
                | StepKind::BlockEgress
                | StepKind::CutOff => {
                    // On at `at`, and off again after the duration, if any.
                    let v = s.value.unwrap_or(0.0);
                    let loss = |a: fn(u32, f64) -> Action| (a(i, v), a(i, 0.0));
                    let block = |a: fn(u32, bool) -> Action| (a(i, true), a(i, false));
                    let (on, off) = match s.action {
                        StepKind::IngressLoss => loss(Action::IngressLoss),
                        StepKind::EgressLoss => loss(Action::EgressLoss),
                        StepKind::BlockIngress => block(Action::BlockIngress),
                        StepKind::BlockEgress => block(Action::BlockEgress),
                        _ => block(Action::CutOff),
                    };
                    self.busy(i, until_end(dur));
                    self.out.push((at, on));
                    if let Some(d) = dur {
                        self.out.push((at + d, off));
                    }
                }
                StepKind::Join | StepKind::Loss | StepKind::Heal | StepKind::Partition => {
                    unreachable!("handled above")
                }
            }
        }
        Ok(())
    }
}
