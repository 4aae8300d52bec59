//! Carrying faults out and healing them, on a [`Cluster`]. Network faults
//! compose: every host's input rules are recomputed from all active
//! network faults whenever one starts or heals.

use std::collections::BTreeSet;
use std::io::Write;

use nix::sys::signal::Signal;

use crate::clock::now_ns;
use crate::cluster::{ClockMode, Cluster, ClusterError, SERVERS};
use crate::history::{CommandRecord, FaultRecord};
use crate::hook::{HookFault, HookKind};
use crate::lab::{ns_pids, signal};
use crate::schedule::{Fault, Net, Target};
use crate::script::{Ledger, Script};

/// What the nemesis needs to know about the cluster now.
pub trait Oracle {
    /// The host that holds the role now, if any is known.
    fn holder(&self) -> Option<usize>;
    /// The control-plane leader's host now, if known.
    fn leader(&self) -> Option<usize>;
    /// A host picked at random (from the run's seeded generator).
    fn any(&mut self, below: usize) -> usize;
    /// An agent was (re)started: its event history starts over.
    fn restarted(&self, host: usize);
    /// Whether the host's agent says `degraded` (its control-plane storage failed).
    fn degraded(&self, host: usize) -> bool;
    /// Whether the host's agent answers its API now.
    fn answers(&self, host: usize) -> bool;
    /// Whether role `db` is paused, as the first agent that knows says.
    fn paused(&self) -> Option<bool>;
    /// Whether the host's agent says now that role `db` is paused in its
    /// own view (what its last committed renewal said).
    fn knows_paused(&self, host: usize) -> bool;
    /// Whether the host's agent answers now that it is the primary.
    fn says_primary(&self, host: usize) -> bool;
}

/// A fault in progress.
#[derive(Debug)]
pub struct Active {
    /// Index of its record.
    pub record: usize,
    /// The fault.
    pub fault: Fault,
    /// The host it targets (host faults).
    pub host: usize,
    /// Input rules it adds: (host, rule).
    pub rules: Vec<(usize, String)>,
    /// Processes it stopped (to continue at heal).
    pub stopped: Vec<i32>,
    /// A hook fault still waiting for a hook to run.
    pub pending_hook: Option<Signal>,
    /// The fillers that keep delayed links full.
    pub fillers: Vec<std::process::Child>,
    /// An operator action's steps.
    pub script: Option<Script>,
}

/// The nemesis: active faults and the record of all of them.
#[derive(Debug, Default)]
pub struct Nemesis {
    /// Faults in progress.
    pub active: Vec<Active>,
    /// Every fault carried out.
    pub records: Vec<FaultRecord>,
    /// Every command operator actions ran.
    pub commands: Vec<CommandRecord>,
    /// Control-plane servers removed and not added back.
    pub removed: BTreeSet<u8>,
    /// The heal phase's script, once begun.
    pub heal_phase: Option<Script>,
}

/// Puts host `h`'s hooks back to normal: no extra delay, no fault, no
/// count of tries.
pub fn restore_hooks(c: &Cluster, h: usize) {
    let dir = &c.lab.dirs[h];
    for f in [
        "hook-delay-ms",
        crate::hook::FAULT_FILE,
        crate::hook::tries_file(HookKind::Promote),
        crate::hook::tries_file(HookKind::Demote),
    ] {
        let _ = std::fs::remove_file(dir.join(f));
    }
}

fn resolve(t: Target, o: &mut dyn Oracle, hosts: usize) -> usize {
    match t {
        Target::Host(h) => h.min(hosts - 1),
        Target::Holder => o.holder().unwrap_or_else(|| o.any(hosts)),
        Target::Leader => o.leader().unwrap_or_else(|| o.any(SERVERS.min(hosts))),
    }
}

fn ip_set(c: &Cluster, hosts: &[usize]) -> String {
    let ips: Vec<String> = hosts.iter().map(|&h| c.lab.ips[h].to_string()).collect();
    format!("{{ {} }}", ips.join(", "))
}

/// Rules for "`a` hears nothing from `b`" (both non-empty).
fn cut(c: &Cluster, a: &[usize], b: &[usize], rules: &mut Vec<(usize, String)>) {
    if b.is_empty() {
        return;
    }
    for &h in a {
        rules.push((h, format!("ip saddr {} drop", ip_set(c, b))));
    }
}

fn fill(dir: &std::path::Path) -> String {
    let chunk = vec![0u8; 1 << 20];
    let Ok(mut f) = std::fs::File::create(dir.join("filler")) else {
        return "could not create the filler".into();
    };
    let mut mb = 0;
    while f.write_all(&chunk).is_ok() && mb < 4096 {
        mb += 1;
    }
    let _ = f.sync_all();
    format!("filled with {mb} MiB")
}

impl Nemesis {
    /// Starts `fault`.
    pub fn apply(
        &mut self,
        c: &mut Cluster,
        fault: &Fault,
        o: &mut dyn Oracle,
    ) -> Result<(), ClusterError> {
        let n = c.names.len();
        let all: Vec<usize> = (0..n).collect();
        let except = |h: usize| all.iter().copied().filter(|&x| x != h).collect::<Vec<_>>();
        let mut act = Active {
            record: self.records.len(),
            fault: fault.clone(),
            host: 0,
            rules: Vec::new(),
            stopped: Vec::new(),
            pending_hook: None,
            fillers: Vec::new(),
            script: None,
        };
        let touched: Vec<usize>;
        let note;
        match fault {
            Fault::Operator(action) => {
                let (script, hosts, why) = crate::operator::plan(action, c, o)?;
                touched = hosts;
                note = why;
                act.host = touched.first().copied().unwrap_or(0);
                act.script = Some(script);
            }
            Fault::Net(net) => {
                let mut rules = Vec::new();
                match net {
                    Net::Halves { side } | Net::Bridge { side, .. } => {
                        // The other side: every host but `side` and a bridge.
                        let bridge = match net {
                            Net::Bridge { bridge, .. } => Some(*bridge),
                            _ => None,
                        };
                        let other: Vec<usize> = all
                            .iter()
                            .copied()
                            .filter(|&h| !side.contains(&h) && Some(h) != bridge)
                            .collect();
                        cut(c, side, &other, &mut rules);
                        cut(c, &other, side, &mut rules);
                        touched = all.clone();
                    }
                    Net::Isolate(target) | Net::OneWay { target, .. } => {
                        // Isolated: both ways; one way: the host's input
                        // (`inbound`), or the others' input from it.
                        let h = resolve(*target, o, n);
                        let other = except(h);
                        if !matches!(net, Net::OneWay { inbound: false, .. }) {
                            cut(c, &[h], &other, &mut rules);
                        }
                        if !matches!(net, Net::OneWay { inbound: true, .. }) {
                            cut(c, &other, &[h], &mut rules);
                        }
                        touched = vec![h];
                    }
                    Net::Delay { hosts, ms } => {
                        for &h in hosts {
                            c.lab.set_delay(h, Some(*ms))?;
                            act.fillers
                                .extend(c.lab.start_fillers(h, &c.cfg.nemesis_bin)?);
                            rules.push((h, format!("udp dport {} drop", crate::lab::FILL_PORT)));
                        }
                        touched = hosts.clone();
                    }
                    Net::Loss { hosts, percent } => {
                        for &h in hosts {
                            let others = ip_set(c, &except(h));
                            let rule =
                                format!("ip saddr {others} numgen random mod 100 < {percent} drop");
                            rules.push((h, rule));
                        }
                        touched = hosts.clone();
                    }
                }
                note = rules
                    .iter()
                    .map(|(h, r)| format!("{}: {r}", c.names[*h]))
                    .collect::<Vec<_>>()
                    .join("; ");
                act.rules = rules;
            }
            _ => {
                let t = match fault {
                    Fault::KillAgent(t)
                    | Fault::StopAgent(t)
                    | Fault::KillWatchdog(t)
                    | Fault::StopWatchdog(t)
                    | Fault::KillHook(t)
                    | Fault::StopHook(t)
                    | Fault::KillHost(t)
                    | Fault::StopHost(t)
                    | Fault::StopHale(t)
                    | Fault::DiskFull(t)
                    | Fault::ClockStep { target: t, .. }
                    | Fault::ClockRate { target: t, .. }
                    | Fault::SlowHooks { target: t, .. }
                    | Fault::HookFails { target: t, .. } => *t,
                    Fault::Net(_) | Fault::Operator(_) => Target::Host(0),
                };
                let h = resolve(t, o, n);
                act.host = h;
                touched = vec![h];
                note = self.apply_host(c, fault, h, &mut act, o)?;
            }
        }
        self.records.push(FaultRecord {
            fault: fault.clone(),
            hosts: touched.iter().map(|&h| c.names[h].clone()).collect(),
            start_ns: now_ns(),
            heal_ns: None,
            note,
        });
        let net = !act.rules.is_empty();
        self.active.push(act);
        if net {
            self.set_rules(c)?;
        }
        Ok(())
    }

    fn apply_host(
        &mut self,
        c: &mut Cluster,
        fault: &Fault,
        h: usize,
        act: &mut Active,
        o: &mut dyn Oracle,
    ) -> Result<String, ClusterError> {
        Ok(match fault {
            Fault::KillAgent(_) => {
                c.kill_agent(h);
                "agent killed".into()
            }
            Fault::StopAgent(_) => {
                act.stopped = c.agent_pid(h).into_iter().collect();
                signal(&act.stopped, Signal::SIGSTOP);
                format!("stopped {:?}", act.stopped)
            }
            Fault::KillWatchdog(_) | Fault::StopWatchdog(_) => {
                let pids = c.host_pids(h, "watchdog");
                if matches!(fault, Fault::KillWatchdog(_)) {
                    signal(&pids, Signal::SIGKILL);
                    format!("killed watchdogs {pids:?}")
                } else {
                    signal(&pids, Signal::SIGSTOP);
                    act.stopped = pids.clone();
                    format!("stopped watchdogs {pids:?}")
                }
            }
            Fault::KillHook(_) | Fault::StopHook(_) => {
                act.pending_hook = Some(if matches!(fault, Fault::KillHook(_)) {
                    Signal::SIGKILL
                } else {
                    Signal::SIGSTOP
                });
                "waiting for a hook to run".into()
            }
            Fault::KillHost(_) => {
                c.kill_host(h);
                "every process killed".into()
            }
            Fault::StopHost(_) => {
                act.stopped = ns_pids(&c.lab.hosts[h]);
                signal(&act.stopped, Signal::SIGSTOP);
                format!("stopped {:?}", act.stopped)
            }
            Fault::StopHale(_) => {
                act.stopped = ns_pids(&c.lab.hosts[h])
                    .into_iter()
                    .filter(|&p| {
                        let cmd = crate::lab::cmdline(p);
                        !matches!(cmd.split(' ').nth(1), Some("register" | "filler"))
                    })
                    .collect();
                signal(&act.stopped, Signal::SIGSTOP);
                format!("stopped hale {:?}, not the register", act.stopped)
            }
            Fault::ClockStep { secs, .. } => {
                c.restart_agent(h, ClockMode::Step(*secs))?;
                o.restarted(h);
                format!("agent restarted with its wall clock {secs:+} s")
            }
            Fault::ClockRate { permille, .. } => {
                c.restart_agent(h, ClockMode::Rate(*permille))?;
                o.restarted(h);
                format!("agent restarted with clocks at {permille}/1000")
            }
            Fault::DiskFull(_) => fill(&c.lab.disks[h]),
            Fault::SlowHooks { ms, .. } => {
                std::fs::write(c.lab.dirs[h].join("hook-delay-ms"), ms.to_string())?;
                format!("hooks {ms} ms slower")
            }
            Fault::HookFails { hook, how, .. } => {
                let f = HookFault {
                    hook: *hook,
                    how: *how,
                };
                let text = serde_json::to_vec(&f).map_err(std::io::Error::other)?;
                for kind in [HookKind::Promote, HookKind::Demote] {
                    let _ = std::fs::remove_file(c.lab.dirs[h].join(crate::hook::tries_file(kind)));
                }
                std::fs::write(c.lab.dirs[h].join(crate::hook::FAULT_FILE), text)?;
                format!("{hook:?} hooks fail: {how:?}")
            }
            Fault::Net(_) | Fault::Operator(_) => String::new(),
        })
    }

    /// Retries hook faults waiting for a hook to run; carries operator
    /// actions on, and records those done and due as healed.
    pub fn tick(&mut self, c: &mut Cluster, o: &mut dyn Oracle) -> Result<(), ClusterError> {
        self.tick_hooks(c);
        let mut i = 0;
        while i < self.active.len() {
            let record = self.active[i].record;
            let Some(script) = self.active[i].script.as_mut() else {
                i += 1;
                continue;
            };
            let mut led = Ledger {
                record: Some(record),
                commands: &mut self.commands,
                removed: &mut self.removed,
            };
            let done = script.tick(c, o, &mut led)?;
            if done && script.heal_due {
                let notes = std::mem::take(&mut script.notes);
                self.active.remove(i);
                let r = &mut self.records[record];
                if !notes.is_empty() {
                    if !r.note.is_empty() {
                        r.note.push_str("; ");
                    }
                    r.note.push_str(&notes.join("; "));
                }
                r.heal_ns = Some(now_ns());
            } else {
                i += 1;
            }
        }
        if let Some(script) = self.heal_phase.as_mut() {
            let mut led = Ledger {
                record: None,
                commands: &mut self.commands,
                removed: &mut self.removed,
            };
            if script.tick(c, o, &mut led)? {
                self.heal_phase = None;
            }
        }
        Ok(())
    }

    /// Whether operator actions (or the heal phase) are still under way.
    pub fn busy(&self) -> bool {
        self.heal_phase.is_some() || self.active.iter().any(|a| a.script.is_some())
    }

    /// Begins the heal phase (after [`Nemesis::heal_all`] and once no
    /// action is under way): agents and registers left down started,
    /// hooks normal, removed servers added back, the role resumed if
    /// paused. [`Nemesis::tick`] carries it out.
    pub fn begin_heal_phase(&mut self, c: &mut Cluster) {
        self.heal_phase = Some(crate::operator::heal_phase(c, &self.removed));
    }

    fn tick_hooks(&mut self, c: &Cluster) {
        for act in &mut self.active {
            let Some(sig) = act.pending_hook else {
                continue;
            };
            let pids = c.host_pids(act.host, "hook");
            if pids.is_empty() {
                continue;
            }
            signal(&pids, sig);
            if sig == Signal::SIGSTOP {
                act.stopped = pids.clone();
            }
            act.pending_hook = None;
            let cmd: Vec<String> = pids.iter().map(|&p| crate::lab::cmdline(p)).collect();
            self.records[act.record].note = format!("{sig:?} {pids:?} at {} ns: {cmd:?}", now_ns());
        }
    }

    /// Heals the fault at `record`.
    pub fn heal(
        &mut self,
        c: &mut Cluster,
        record: usize,
        o: &mut dyn Oracle,
    ) -> Result<(), ClusterError> {
        let Some(pos) = self.active.iter().position(|a| a.record == record) else {
            return Ok(());
        };
        if let Some(script) = self.active[pos].script.as_mut() {
            // Its steps after the heal may run now; tick records the heal.
            script.heal_due = true;
            return self.tick(c, o);
        }
        let mut act = self.active.remove(pos);
        let h = act.host;
        for f in &mut act.fillers {
            let _ = f.kill();
            let _ = f.wait();
        }
        if let Fault::Net(Net::Delay { hosts, .. }) = &act.fault {
            for &d in hosts {
                // Another delay still on this host keeps its queue.
                let still = self.active.iter().find_map(|a| match &a.fault {
                    Fault::Net(Net::Delay { hosts, ms }) if hosts.contains(&d) => Some(*ms),
                    _ => None,
                });
                c.lab.set_delay(d, still)?;
            }
        }
        signal(&act.stopped, Signal::SIGCONT);
        match act.fault {
            Fault::KillAgent(_) => {
                c.restart_agent(h, c.clocks[h])?;
                o.restarted(h);
            }
            Fault::KillHost(_) => {
                c.restart_host(h)?;
                o.restarted(h);
            }
            Fault::ClockStep { .. } | Fault::ClockRate { .. } => {
                c.restart_agent(h, ClockMode::True)?;
                o.restarted(h);
            }
            Fault::DiskFull(_) => {
                let _ = std::fs::remove_file(c.lab.disks[h].join("filler"));
                // The documented recovery (README, Metrics): a control-plane
                // server whose storage failed stays stopped until its agent
                // restarts, so the heal does what an operator is told to.
                if o.degraded(h) {
                    c.restart_agent(h, c.clocks[h])?;
                    o.restarted(h);
                    self.records[record]
                        .note
                        .push_str("; storage had failed: agent restarted at heal");
                }
            }
            Fault::SlowHooks { .. } => {
                let _ = std::fs::remove_file(c.lab.dirs[h].join("hook-delay-ms"));
                let still = self.active.iter().find_map(|a| match a.fault {
                    Fault::SlowHooks { ms, .. } if a.host == h => Some(ms),
                    _ => None,
                });
                if let Some(ms) = still {
                    std::fs::write(c.lab.dirs[h].join("hook-delay-ms"), ms.to_string())?;
                }
            }
            Fault::HookFails { .. } => {
                let _ = std::fs::remove_file(c.lab.dirs[h].join(crate::hook::FAULT_FILE));
                for kind in [HookKind::Promote, HookKind::Demote] {
                    let _ = std::fs::remove_file(c.lab.dirs[h].join(crate::hook::tries_file(kind)));
                }
                // Another hook fault still on this host stays in force.
                let still = self.active.iter().find_map(|a| match a.fault {
                    Fault::HookFails { hook, how, .. } if a.host == h => {
                        Some(HookFault { hook, how })
                    }
                    _ => None,
                });
                if let Some(f) = still {
                    let text = serde_json::to_vec(&f).map_err(std::io::Error::other)?;
                    std::fs::write(c.lab.dirs[h].join(crate::hook::FAULT_FILE), text)?;
                }
            }
            Fault::Net(_) => self.set_rules(c)?,
            _ => {}
        }
        self.records[record].heal_ns = Some(now_ns());
        Ok(())
    }

    /// Heals everything still active.
    pub fn heal_all(&mut self, c: &mut Cluster, o: &mut dyn Oracle) -> Result<(), ClusterError> {
        let records: Vec<usize> = self.active.iter().map(|a| a.record).collect();
        for r in records {
            self.heal(c, r, o)?;
        }
        Ok(())
    }

    fn set_rules(&self, c: &Cluster) -> Result<(), ClusterError> {
        for h in 0..c.names.len() {
            let rules: Vec<String> = self
                .active
                .iter()
                .flat_map(|a| a.rules.iter())
                .filter(|(x, _)| *x == h)
                .map(|(_, r)| r.clone())
                .collect();
            c.lab.set_rules(h, &rules)?;
        }
        Ok(())
    }
}
