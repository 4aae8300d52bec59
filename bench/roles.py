#!/usr/bin/env python3
"""Roles at scale: 3 agents on loopback (each a control-plane server and a
candidate for every role, instant hooks), N roles spread over them by
priority. Measures, over a steady window: changes of holder, demote hooks,
control-plane log entries per second (the leader's last log index) and disk
bytes written per second (/proc/PID/io of the agents, which hold the
control-plane stores), agent CPU; then, with --kill, SIGKILLs the host
holding the most roles (its agent, watchdog and hooks) and reports how
long each of its roles took to be promoted elsewhere, and whether any
other role moved. With
--leader-trials N, instead: N times, kill (or, with --freeze, SIGSTOP for
5 s) the agent whose control-plane server leads, bring it back, and count
the roles *it did not hold* that changed holder or ran a demote hook (none
may). --busy N keeps N busy loops running (a loaded host, as in CI);
--promote-sleep S makes promote hooks take S seconds.

Usage: bench/roles.py --roles 1000 --secs 600 [--kill] [--hale target/release/hale]
       bench/roles.py --roles 3 --leader-trials 50 [--freeze] --busy 2 --promote-sleep 3
Results: BENCHMARKS.md, section "Roles at scale". Only loopback; every
process it starts is killed by pid when it ends.
"""

import argparse
import base64
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

AGENTS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def leases(http):
    """role -> (holder, epoch) as agent `http` reads the lease table."""
    try:
        v = json.loads(get(f"http://{http}/v1/roles", timeout=5))
    except Exception:
        return None
    out = {}
    for role, l in (v.get("leases") or {}).items():
        out[role] = (l.get("holder"), l.get("epoch"))
    return out


def metric(http, name):
    """The sum of a metric's series on agent `http`."""
    total, seen = 0.0, False
    for line in get(f"http://{http}/metrics", timeout=5).splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def proc_io(pid):
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_cpu(pid):
    """User + system seconds of `pid` and its reaped children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / tck
    except OSError:
        return 0.0


def hook_lines(path):
    """(unix ns, node, kind, role, epoch) per line of the hook log."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 5:
                    out.append((int(p[0]), p[1], p[2], p[3], int(p[4])))
    except OSError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--roles", type=int, default=200)
    ap.add_argument("--secs", type=float, default=120)
    ap.add_argument("--kill", action="store_true")
    ap.add_argument("--hale", default="target/release/hale")
    ap.add_argument("--settle", type=float, default=180, help="most seconds to wait for every role to be held")
    ap.add_argument("--leader-trials", type=int, default=0)
    ap.add_argument("--freeze", action="store_true")
    ap.add_argument("--busy", type=int, default=0)
    ap.add_argument("--promote-sleep", type=float, default=0)
    ap.add_argument("--no-hooks", action="store_true", help="roles with no promote or demote command (no hook processes)")
    ap.add_argument("--hook-nice", type=int, default=None, help="run the hooks under `nice -n N`")
    ap.add_argument("--hook", choices=["sh", "python3"], default="sh",
                    help="sh: one `sh -c echo` process per hook; python3: one python3 process (~25 ms of CPU)")
    ap.add_argument("--priority-boost", type=int, default=None, help="[agent] priority_boost (default: the agent's)")
    ap.add_argument("--hooks-at-once", type=int, default=None, help="[agent] hooks_at_once (default: the agent's)")
    a = ap.parse_args()
    hale = os.path.abspath(a.hale)
    d = tempfile.mkdtemp(prefix="hale-roles-")
    log = os.path.join(d, "hooks.log")
    key = base64.b64encode(os.urandom(32)).decode()
    nodes = [
        {"name": f"n{i}", "gossip": free_port(), "http": free_port(), "control": free_port()}
        for i in range(AGENTS)
    ]
    servers = ", ".join(f'"{i + 1}=127.0.0.1:{n["control"]}"' for i, n in enumerate(nodes))
    # The agents, by index (a restarted one replaces its entry), and the busy
    # loops: kept apart, so that index i is always agent n{i}.
    agents, busy = [], []

    def cleanup(*_):
        for p in busy + agents:
            if p.poll() is None:
                p.kill()
        for p in busy + agents:
            try:
                p.wait(timeout=10)
            except Exception:
                pass

    signal.signal(signal.SIGTERM, lambda *_: (cleanup(), sys.exit(1)))

    def start(path, name):
        out = open(os.path.join(d, f"{name}.log"), "a")
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        return subprocess.Popen([hale, "agent", "--config", path], stdout=out, stderr=out, env=env)

    busy.extend(subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.busy))
    try:
        for i, n in enumerate(nodes):
            name = n["name"]
            nap = f"sleep {a.promote_sleep}; " if a.promote_sleep else ""
            niced = f'"nice", "-n", "{a.hook_nice}", ' if a.hook_nice is not None else ""
            if a.hook == "python3":
                hook = lambda kind, name=name: python_hook(niced, log, name, kind, a.promote_sleep)
            else:
                hook = lambda kind: (
                    f'[{niced}"sh", "-c", "{nap if kind == "promote" else ""}echo $(date +%s%N) {name} {kind} $HALE_ROLE $HALE_EPOCH >> {log}"]'
                )
            roles = "".join(
                f"""
[[role]]
name = "r{r}"
service = "svc"
priority = {100 if r % AGENTS == i else 50 - i}
promote = {"[]" if a.no_hooks else hook("promote")}
demote = {"[]" if a.no_hooks else hook("demote")}
"""
                for r in range(a.roles)
            )
            seeds = "" if i == 0 else f'seeds = ["127.0.0.1:{nodes[0]["gossip"]}"]'
            cfg = f"""
[agent]
name = "{name}"
bind = "127.0.0.1:{n["gossip"]}"
http = "127.0.0.1:{n["http"]}"
{seeds}
watchdog = "{hale}"
{"" if a.priority_boost is None else f"priority_boost = {a.priority_boost}"}
{"" if a.hooks_at_once is None else f"hooks_at_once = {a.hooks_at_once}"}
[cluster]
name = "roles-bench"
keys = ["{key}"]
[control]
id = {i + 1}
bind = "127.0.0.1:{n["control"]}"
servers = [{servers}]
bootstrap = {"true" if i == 0 else "false"}
data_dir = "{d}/data-{name}"
[[service]]
name = "svc"
essential = true
[[service.check]]
command = ["true"]
interval = "1s"
timeout = "1s"
{roles}"""
            path = os.path.join(d, f"{name}.toml")
            with open(path, "w") as f:
                f.write(cfg)
            agents.append(start(path, name))
        http = [f"127.0.0.1:{n['http']}" for n in nodes]
        print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} roles={a.roles} agents={AGENTS} secs={a.secs} dir={d}")
        t0 = time.time()
        while True:
            l = leases(http[0])
            held = sum(1 for h, _ in (l or {}).values() if h)
            if held == a.roles:
                break
            if time.time() - t0 > a.settle:
                print(f"RESULT settle FAILED: {held} of {a.roles} roles held after {a.settle} s")
                return 1
            time.sleep(1)
        settled = time.time() - t0
        print(f"all {a.roles} roles held after {settled:.1f} s")
        run_ns = int(t0 * 1e9)
        time.sleep(5 + a.promote_sleep)  # let the grants' promote hooks finish
        if a.leader_trials:
            return leader_trials(a, nodes, agents, http, log, start, d)
        start = time.time()
        start_ns = time.time_ns()
        io0 = [proc_io(p.pid) for p in agents]
        cpu0 = [proc_cpu(p.pid) for p in agents]
        idx0 = max(metric(h, "hale_control_last_log_index") or 0 for h in http)
        term0 = max(metric(h, "hale_control_term") or 0 for h in http)
        paused0 = paused_events(d)
        l0 = leases(http[0])
        time.sleep(a.secs)
        el = time.time() - start
        io1 = [proc_io(p.pid) for p in agents]
        cpu1 = [proc_cpu(p.pid) for p in agents]
        idx1 = max(metric(h, "hale_control_last_log_index") or 0 for h in http)
        term1 = max(metric(h, "hale_control_term") or 0 for h in http)
        paused1 = paused_events(d)
        l1 = leases(http[0])
        window = [x for x in hook_lines(log) if x[0] >= start_ns]
        promotes = sum(1 for x in window if x[2] == "promote")
        demotes = sum(1 for x in window if x[2] == "demote")
        changed = sum(1 for r in l0 if l1 and l1.get(r) != l0[r])
        unheld = sum(1 for h, _ in (l1 or {}).values() if not h)
        per = {n["name"]: sum(1 for h, _ in l1.values() if h == n["name"]) for n in nodes}
        print(f"RESULT steady roles={a.roles} secs={el:.0f} changes_of_holder={changed} promote_hooks={promotes} demote_hooks={demotes} unheld_at_end={unheld} held_per_agent={per}")
        whole = [x for x in hook_lines(log) if x[0] >= run_ns]
        print(
            f"RESULT whole-run roles={a.roles} hook={a.hook} busy={a.busy} settled_s={settled:.1f} "
            f"promote_hooks={sum(1 for x in whole if x[2] == 'promote')} "
            f"demote_hooks={sum(1 for x in whole if x[2] == 'demote')} (from the agents' start)"
        )
        print(
            f"RESULT cost roles={a.roles} log_entries_per_s={(idx1 - idx0) / el:.1f} "
            f"disk_bytes_per_s_per_server={sum(b - a_ for a_, b in zip(io0, io1)) / el / AGENTS:.0f} "
            f"agent_cpu_percent={100 * sum(b - a_ for a_, b in zip(cpu0, cpu1)) / el / AGENTS:.1f} "
            f"raft_elections={term1 - term0} agent_paused_events={paused1 - paused0}"
        )
        if not a.kill:
            return 0
        victim_name = max(per, key=per.get)
        vi = [n["name"] for n in nodes].index(victim_name)
        theirs = {r for r, (h, _) in l1.items() if h == victim_name}
        kill_ns = time.time_ns()
        kill_host(agents[vi])
        alive = [h for j, h in enumerate(http) if j != vi]
        deadline = time.time() + 30
        while time.time() < deadline:
            lines = [x for x in hook_lines(log) if x[0] >= kill_ns and x[2] == "promote"]
            if {x[3] for x in lines} >= theirs:
                break
            time.sleep(0.2)
        time.sleep(3)
        lines = [x for x in hook_lines(log) if x[0] >= kill_ns]
        first = {}
        for ns, node, kind, role, epoch in lines:
            if kind == "promote" and role in theirs and role not in first:
                first[role] = (ns - kill_ns) / 1e9
        others = sorted({x[3] for x in lines if x[3] not in theirs})
        times = sorted(first.values())
        missing = len(theirs) - len(first)
        if times:
            p50 = times[len(times) // 2]
            print(
                f"RESULT kill roles={a.roles} victim={victim_name} its_roles={len(theirs)} "
                f"promoted={len(first)} missing={missing} p50_s={p50:.2f} max_s={times[-1]:.2f} "
                f"other_roles_moved={len(others)}"
            )
        else:
            print(f"RESULT kill roles={a.roles} victim={victim_name} its_roles={len(theirs)} promoted=0 other_roles_moved={len(others)}")
        l2 = leases(alive[0]) or {}
        print(f"after kill: {sum(1 for h, _ in l2.values() if h)} of {a.roles} roles held")
        return 0
    finally:
        cleanup()


def python_hook(niced, log, name, kind, nap):
    """A hook that starts one python3 process appending its line to `log`,
    as a TOML array (literal strings: the Python code keeps its quotes)."""
    sleep = "time.sleep(%s); " % nap if nap and kind == "promote" else ""
    code = (
        "import os, time; " + sleep + 'f = open("' + log + '", "a"); '
        + 'f.write("%d ' + name + " " + kind + ' %s %s\\n" % '
        + '(time.time_ns(), os.environ["HALE_ROLE"], os.environ["HALE_EPOCH"]))'
    )
    return "[" + niced + "'python3', '-c', '" + code + "']"


def paused_events(d):
    """How many times the agents noticed their own runtime stalled (their
    `paused` membership events, in their logs)."""
    n = 0
    for i in range(AGENTS):
        try:
            with open(os.path.join(d, f"n{i}.log"), errors="replace") as f:
                n += sum(1 for line in f if "membership event" in line and '"paused"' in line)
        except OSError:
            pass
    return n


def kill_host(agent):
    """A host's death: SIGKILL to the agent and every process below it (its
    watchdog and hooks die with the host; killing the agent alone is an
    agent crash, after which its watchdog fences every role it held at once,
    on the CPU the other "hosts" of this one machine share)."""
    for p in descendants(agent.pid):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    agent.wait()


def descendants(pid):
    """`pid` and every process below it (its watchdogs and hooks)."""
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(p))
            except OSError:
                pass
    out, todo = [], [pid]
    while todo:
        x = todo.pop()
        out.append(x)
        todo.extend(kids.get(x, []))
    return out


def hooks_idle(agents, http):
    """Whether no agent runs or queues a hook and no hook or fence process
    is left below any agent (a watchdog's fences are not in the metrics;
    a watchdog runs as `/proc/self/exe`: its name is "exe")."""
    for h in http:
        try:
            busy = (metric(h, "hale_hooks_running") or 0) + (metric(h, "hale_hooks_queued") or 0)
        except Exception:
            continue  # a killed agent, restarting
        if busy:
            return False
    for agent in agents:
        for p in descendants(agent.pid)[1:]:
            try:
                with open(f"/proc/{p}/comm") as f:
                    if f.read().strip() not in ("hale", "exe"):
                        return False
            except OSError:
                pass
    return True


def leader_of(http):
    """The index of the agent whose control-plane server leads, if one does."""
    for i, h in enumerate(http):
        try:
            if metric(h, "hale_control_is_leader") == 1:
                return i
        except Exception:
            pass
    return None


def leader_trials(a, nodes, agents, http, log, start, d):
    moved_total, demotes_total, done, skipped, no_new_term = 0, 0, 0, 0, 0
    for trial in range(a.leader_trials):
        deadline = time.time() + 120
        while time.time() < deadline and not hooks_idle(agents, http):
            time.sleep(0.5)
        deadline = time.time() + 60
        li, l0 = None, None
        while time.time() < deadline:
            li = leader_of(http)
            l0 = leases(http[(li + 1) % AGENTS]) if li is not None else None
            if li is not None and l0 and all(h for h, _ in l0.values()):
                break
            time.sleep(0.5)
        if li is None or not l0:
            skipped += 1
            print(f"trial {trial}: no leader or roles unheld; skipped")
            continue
        victim = nodes[li]["name"]
        others = {r for r, (h, _) in l0.items() if h != victim}
        if not others:
            # The leader's host holds every role (roles gather there as
            # trials go): hand one to the next agent first (planned), so
            # that the fault hits the leader alone, as the suite's test does.
            role = sorted(l0)[0]
            to = nodes[(li + 1) % AGENTS]["name"]
            subprocess.run([a.hale, "roles", "handover", role, "--to", to, "--http", http[li]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
            deadline = time.time() + 30
            while time.time() < deadline:
                l0 = leases(http[(li + 1) % AGENTS]) or {}
                if l0.get(role, (None,))[0] == to:
                    break
                time.sleep(0.5)
            time.sleep(1 + a.promote_sleep)
            l0 = leases(http[(li + 1) % AGENTS]) or {}
            if leader_of(http) != li or not all(h for h, _ in l0.values()):
                skipped += 1
                print(f"trial {trial}: handed {role} to {to}, but the leader moved or a role is unheld; skipped")
                continue
            others = {r for r, (h, _) in l0.items() if h != victim}
            if not others:
                skipped += 1
                print(f"trial {trial}: the leader's host holds every role and the handover failed; skipped")
                continue
        # The leader's host holds fewer than its share (roles gather on the
        # hosts that were not frozen as trials go): hand it roles until it
        # does, so that every trial's thaw fences a third of the roles, as
        # the first trial's does.
        share = len(l0) // AGENTS
        held = [r for r, (h, _) in l0.items() if h == victim]
        if len(held) < share:
            give = sorted(others)[: share - len(held)]
            procs = []
            index = {n["name"]: i for i, n in enumerate(nodes)}
            for role in give:
                # Asked of the agent that holds it.
                at = http[index[l0[role][0]]]
                procs.append(subprocess.Popen(
                    [a.hale, "roles", "handover", role, "--to", victim, "--http", at],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                if len(procs) >= 8:
                    procs.pop(0).wait(timeout=60)
            for p in procs:
                p.wait(timeout=60)
            deadline = time.time() + 60
            while time.time() < deadline:
                l0 = leases(http[(li + 1) % AGENTS]) or {}
                if all(l0.get(r, (None,))[0] == victim for r in give):
                    break
                time.sleep(0.5)
            time.sleep(3 + a.promote_sleep)
            l0 = leases(http[(li + 1) % AGENTS]) or {}
            if leader_of(http) != li or not all(h for h, _ in l0.values()):
                skipped += 1
                print(f"trial {trial}: handed {len(give)} roles to the leader {victim}, but the leader moved or a role is unheld; skipped")
                continue
            others = {r for r, (h, _) in l0.items() if h != victim}
        # The previous trial's hooks done (a thawed host's demotes and
        # fences, the promotions its roles took elsewhere): a demote still
        # queued from it would be counted against this one.
        deadline = time.time() + 120
        while time.time() < deadline and not hooks_idle(agents, http):
            time.sleep(0.5)
        term0 = metric(http[(li + 1) % AGENTS], "hale_control_term")
        # A random point of the renewal period.
        time.sleep(random.random() * 0.25)
        t_ns = time.time_ns()
        if a.freeze:
            pids = descendants(agents[li].pid)
            for p in pids:
                try:
                    os.kill(p, signal.SIGSTOP)
                except OSError:
                    pass
            time.sleep(5)
            for p in pids:
                try:
                    os.kill(p, signal.SIGCONT)
                except OSError:
                    pass
        else:
            kill_host(agents[li])
            time.sleep(2)
            agents[li] = start(os.path.join(d, f"{victim}.toml"), victim)
        # Settle: every role held again, then look.
        deadline = time.time() + 60
        while time.time() < deadline:
            l1 = leases(http[(li + 1) % AGENTS])
            if l1 and all(h for h, _ in l1.values()):
                break
            time.sleep(0.5)
        time.sleep(3 + a.promote_sleep)
        l1 = leases(http[(li + 1) % AGENTS]) or {}
        moved = sorted(r for r in others if l1.get(r) != l0.get(r))
        demotes = [x for x in hook_lines(log) if x[0] >= t_ns and x[2] == "demote" and x[3] in others]
        # The fault really cost the leader its leadership: a new term.
        term1 = metric(http[(li + 1) % AGENTS], "hale_control_term")
        after = leader_of(http)
        if not (term0 is not None and term1 is not None and term1 > term0):
            no_new_term += 1
        moved_total += len(moved)
        demotes_total += len(demotes)
        done += 1
        print(
            f"trial {trial}: leader {victim} {'frozen 5 s' if a.freeze else 'killed'} holding {len(l0) - len(others)}; "
            f"{len(others)} roles held elsewhere, moved {len(moved)}, demote hooks {len(demotes)}; "
            f"term {term0} -> {term1}, leader now {nodes[after]['name'] if after is not None else None}"
            + (f" {moved[:5]}" if moved else "")
            # Which node ran each counted demote, of which role and epoch,
            # and what the table said of that role before and after.
            + "".join(f" [demote {x[1]} {x[3]} epoch {x[4]} at +{(x[0] - t_ns) / 1e9:.1f}s: "
                      f"before {l0.get(x[3])}, after {l1.get(x[3])}]" for x in demotes[:5])
        )
    print(
        f"RESULT leader-{'freeze' if a.freeze else 'kill'} roles={a.roles} trials={done} skipped={skipped} "
        f"busy={a.busy} promote_sleep={a.promote_sleep} roles_moved={moved_total} demote_hooks={demotes_total} "
        f"trials_without_new_term={no_new_term}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
