#!/usr/bin/env python3
"""Rolling upgrade, previous release -> this one, under load.

5 agents on loopback (n0-n2 control-plane servers, n3-n4 clients of it),
every one a candidate for role `db`, whose promote hook takes --promote-sleep
seconds (3) and whose hooks append to a log. All start on the previous
release (dist/previous-release.toml, built by the suite into
target/previous-release/); --busy loops keep the cores busy (a loaded host)
and a client reads every agent's API 20 times a second. Then, one agent at a
time, the holder's included, the documented procedure (README, "Upgrades
and compatibility"):

  * an agent that does not hold the role: SIGTERM (it leaves), start the
    new binary on the same configuration and state, wait until every agent
    sees it alive and (a server) its control plane caught up;
  * the holder's: `hale roles pause db`; stop its agent without stepping
    down (the previous release: SIGKILL the agent and its watchdog
    together; this release: SIGTERM, which keeps a paused role); start the
    new binary, which adopts the role at its epoch; `hale roles resume db`.

Throughout, every 100 ms: the lease table as one live agent reads it (a
change of holder or epoch, or a moment with no holder, is counted), every
agent's members (a live agent seen dead by another is a false death; for
every ordered pair of running agents, the longest one had heard nothing
from the other, `last_heard_ms_ago`, and how often it suspected it) and, at
each step, the packets per wire version (hale_wire_packets_total). Then
--downgrade: one non-holder agent back to the previous release and up again.

Usage: bench/rolling-upgrade.py [--new target/release/hale] [--old PATH]
Results: BENCHMARKS.md, "Rolling upgrade". Only loopback; every process it
starts is killed by pid when it ends.
"""

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from roles import free_port, get  # bench/roles.py: the same loopback helpers

AGENTS, SERVERS = 5, 3


def getj(url, timeout=2.0):
    try:
        return json.loads(get(url, timeout))
    except Exception:
        return None


def metric_series(http, name):
    """{labels: value} of one metric on agent `http` (None: no answer)."""
    try:
        text = get(f"http://{http}/metrics", timeout=3)
    except Exception:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, v = line[len(name) + 1 :].rsplit("} ", 1)
            out[labels] = float(v)
    return out


def previous_exe(root):
    fields = {}
    with open(os.path.join(root, "dist/previous-release.toml")) as f:
        for line in f:
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                fields[k.strip()] = v.strip().strip('"')
    exe = os.path.join(root, "target/previous-release", fields["commit"], "target/debug/hale")
    return exe, fields


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    return out


class Watch(threading.Thread):
    """Polls the lease table and every agent's view every 100 ms."""

    def __init__(self, http, names):
        super().__init__(daemon=True)
        self.http, self.names = http, names
        self.down = set()  # agents being replaced: not polled, not judged
        self.stop = False
        self.lease = None  # (holder, epoch) last seen
        self.changes, self.gaps, self.false_deaths = [], [], []
        self.samples = 0
        # When each agent came back: a pair is judged from 3 s after both
        # sides run again (a new run has not heard everyone yet).
        self.back = {}
        # Per ordered pair (observer, member): the longest the observer had
        # heard nothing from the member, and how often it suspected it.
        self.silence, self.suspects = {}, 0

    def run(self):
        while not self.stop:
            live = [i for i in range(len(self.http)) if i not in self.down]
            table = None
            for i in live:
                v = getj(f"http://{self.http[i]}/v1/roles", timeout=1)
                if v is not None:
                    l = (v.get("leases") or {}).get("db") or {}
                    table = (l.get("holder"), l.get("epoch"))
                    break
            if table is not None:
                self.samples += 1
                if table[0] is None:
                    self.gaps.append(time.time())
                elif self.lease is not None and table != self.lease:
                    self.changes.append((time.time(), self.lease, table))
                if table[0] is not None:
                    self.lease = table
            for i in live:
                ms = getj(f"http://{self.http[i]}/v1/members", timeout=1) or []
                for m in ms:
                    j = self.names.index(m["name"]) if m["name"] in self.names else None
                    if m.get("state") == "dead" and j is not None and j not in self.down:
                        self.false_deaths.append((time.time(), self.names[i], m["name"]))
                    settled = lambda k: time.time() - self.back.get(k, 0) > 3
                    if j is None or j == i or j in self.down or not settled(i) or not settled(j):
                        continue
                    if m.get("state") == "suspect":
                        self.suspects += 1
                    heard = m.get("last_heard_ms_ago")
                    pair = (self.names[i], m["name"])
                    worst = self.silence.get(pair, 0)
                    self.silence[pair] = max(worst, 10**9 if heard is None else heard)
            time.sleep(0.1)


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    old_default, prev = previous_exe(root)
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", default=os.path.join(root, "target/release/hale"))
    ap.add_argument("--old", default=old_default)
    ap.add_argument("--busy", type=int, default=2)
    ap.add_argument("--promote-sleep", type=float, default=3)
    ap.add_argument("--no-downgrade", action="store_true")
    a = ap.parse_args()
    new, old = os.path.abspath(a.new), os.path.abspath(a.old)
    for exe in (new, old):
        if not os.access(exe, os.X_OK):
            print(f"missing {exe} (the previous release: cargo test -p hale --test it versions builds it)")
            return 2
    d = tempfile.mkdtemp(prefix="hale-upgrade-")
    hooks = os.path.join(d, "hooks.log")
    key = base64.b64encode(os.urandom(32)).decode()
    nodes = [
        {"name": f"n{i}", "gossip": free_port(), "http": free_port(), "control": free_port()}
        for i in range(AGENTS)
    ]
    names = [n["name"] for n in nodes]
    http = [f"127.0.0.1:{n['http']}" for n in nodes]
    servers = ", ".join(f'"{i + 1}=127.0.0.1:{nodes[i]["control"]}"' for i in range(SERVERS))
    procs, busy, exes = [None] * AGENTS, [], [old] * AGENTS
    load_stop = threading.Event()

    def cleanup(*_):
        load_stop.set()
        for p in busy + [p for p in procs if p]:
            for c in children(p.pid):
                try:
                    os.kill(c, signal.SIGKILL)
                except OSError:
                    pass
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=10)
            except Exception:
                pass

    signal.signal(signal.SIGTERM, lambda *_: (cleanup(), sys.exit(1)))
    for i, n in enumerate(nodes):
        name = n["name"]
        hook = lambda kind: (
            f'["sh", "-c", "{"sleep " + str(a.promote_sleep) + "; " if kind == "promote" else ""}'
            f'echo $(date +%s%N) {name} {kind} $HALE_EPOCH >> {hooks}"]'
        )
        server = (
            f'id = {i + 1}\nbind = "127.0.0.1:{n["control"]}"\nbootstrap = {"true" if i == 0 else "false"}\n'
            f'data_dir = "{d}/data-{name}"\n'
            if i < SERVERS
            else ""
        )
        seeds = ", ".join(f'"127.0.0.1:{nodes[j]["gossip"]}"' for j in range(AGENTS) if j != i)
        cfg = f"""
[agent]
name = "{name}"
bind = "127.0.0.1:{n["gossip"]}"
http = "127.0.0.1:{n["http"]}"
seeds = [{seeds}]
state_dir = "{d}/state-{name}"
watchdog = "{{exe}}"
[cluster]
name = "upgrade-bench"
keys = ["{key}"]
[control]
{server}servers = [{servers}]
[[service]]
name = "svc"
essential = true
[[service.check]]
command = ["true"]
interval = "1s"
timeout = "1s"
[[role]]
name = "db"
service = "svc"
priority = {100 - i * 10}
promote = {hook("promote")}
demote = {hook("demote")}
"""
        with open(os.path.join(d, f"{name}.toml.in"), "w") as f:
            f.write(cfg)

    def start(i, exe):
        path = os.path.join(d, f"n{i}.toml")
        with open(os.path.join(d, f"n{i}.toml.in")) as f:
            text = f.read().replace("{exe}", exe)
        with open(path, "w") as f:
            f.write(text)
        out = open(os.path.join(d, f"n{i}.log"), "a")
        env = dict(os.environ, HALE_LOG=os.environ.get("HALE_LOG", "info"), NO_COLOR="1")
        procs[i] = subprocess.Popen([exe, "agent", "--config", path], stdout=out, stderr=out, env=env)
        exes[i] = exe

    def cli(*args):
        live = next(i for i in range(AGENTS) if procs[i] and procs[i].poll() is None)
        return subprocess.run([new, "roles", *args, "--http", http[live]], capture_output=True, text=True)

    def wait(what, cond, secs=60):
        t0 = time.time()
        while time.time() - t0 < secs:
            if cond():
                return time.time() - t0
            time.sleep(0.1)
        raise SystemExit(f"RESULT FAILED: {what} within {secs} s (logs in {d})")

    def all_alive():
        for i in range(AGENTS):
            ms = getj(f"http://{http[i]}/v1/members", timeout=1)
            if not ms or sum(1 for m in ms if m.get("state") == "alive") != AGENTS:
                return False
        return True

    def holder():
        v = getj(f"http://{http[0]}/v1/roles", timeout=1) or getj(f"http://{http[1]}/v1/roles", timeout=1)
        l = ((v or {}).get("leases") or {}).get("db") or {}
        return l.get("holder"), l.get("epoch")

    def caught_up(i):
        if i >= SERVERS:
            return True
        idx = [
            (metric_series(http[j], "hale_control_applied_index") or {}).get(f'node="n{j}",server="{j + 1}"')
            for j in range(SERVERS)
        ]
        return None not in idx and idx[i] >= max(idx) - 5

    def versions():
        tot = {}
        for i in range(AGENTS):
            for labels, v in (metric_series(http[i], "hale_wire_packets_total") or {}).items():
                key = labels.split(",", 1)[1]
                tot[key] = tot.get(key, 0) + v
        return tot

    def hook_runs(kind, since_ns=0):
        try:
            with open(hooks) as f:
                return sum(1 for l in f if l.split()[2] == kind and int(l.split()[0]) >= since_ns)
        except OSError:
            return 0

    def load():
        while not load_stop.is_set():
            for h in http:
                try:
                    get(f"http://{h}/v1/health", timeout=1)
                except Exception:
                    pass
            time.sleep(0.05)

    busy.extend(subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.busy))
    try:
        for i in range(AGENTS):
            start(i, old)
        print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} previous release {prev['version']} ({prev['commit'][:12]}) -> {new}; busy={a.busy} promote_sleep={a.promote_sleep} dir={d}")
        wait("the cluster to form", all_alive)
        wait("a holder promoted", lambda: hook_runs("promote") >= 1 and holder()[0] is not None, 90)
        time.sleep(a.promote_sleep + 3)
        threading.Thread(target=load, daemon=True).start()
        watch = Watch(http, names)
        watch.start()
        t_begin = time.time_ns()
        h0 = holder()
        print(f"holder {h0[0]} epoch {h0[1]}; packets by version {versions()}")

        def replace(i, exe, label):
            t0 = time.time()
            is_holder = holder()[0] == names[i]
            watch.down.add(i)
            if is_holder:
                r = cli("pause", "db")
                if r.returncode != 0:
                    raise SystemExit(f"RESULT FAILED: pause: {r.stderr}")
                wait("the pause to reach the holder", lambda: (getj(f"http://{http[i]}/v1/roles") or {}).get("leases", {}).get("db", {}).get("paused"), 10)
                if exes[i] == old:
                    # The previous release hands over on SIGTERM even when
                    # paused: kill it with its watchdog, at once.
                    kids = children(procs[i].pid)
                    for pid in [procs[i].pid] + kids:
                        os.kill(pid, signal.SIGKILL)
                else:
                    procs[i].send_signal(signal.SIGTERM)
            else:
                procs[i].send_signal(signal.SIGTERM)
            procs[i].wait(timeout=30)
            stopped = time.time() - t0
            start(i, exe)
            wait(f"{names[i]} back alive everywhere", all_alive)
            wait(f"{names[i]}'s control plane caught up", lambda: caught_up(i))
            if is_holder:
                # The new run adopts the paused role at its epoch (its own
                # gauge says it holds it again), then it is resumed.
                held = lambda: (metric_series(http[i], "hale_role_holder") or {}).get(f'node="n{i}",role="db"') == 1
                wait(f"{names[i]} holding again", lambda: held() and holder() == (names[i], h0[1]), 30)
                r = cli("resume", "db")
                if r.returncode != 0:
                    raise SystemExit(f"RESULT FAILED: resume: {r.stderr}")
            watch.back[i] = time.time()
            watch.down.discard(i)
            took = time.time() - t0
            print(f"{label} {names[i]}{' (holder)' if is_holder else ''}: {took:.1f} s (stopped after {stopped:.1f} s); holder {holder()}; packets by version {versions()}")
            return took

        order = [i for i in range(AGENTS) if names[i] != h0[0]] + [names.index(h0[0])]
        times = [replace(i, new, "upgraded") for i in order]
        time.sleep(5)
        v_after = versions()
        writes = [(metric_series(http[i], "hale_wire_version") or {}).get(f'node="n{i}"') for i in range(AGENTS)]
        print(f"RESULT upgrade agents={AGENTS} per_agent_s={[round(t, 1) for t in times]} changes_of_holder={len(watch.changes)} lease_gaps={len(watch.gaps)} false_deaths={len(watch.false_deaths)} demote_hooks={hook_runs('demote', t_begin)} promote_hooks={hook_runs('promote', t_begin)} wire_written={writes}")
        if not a.no_downgrade:
            i = order[0]
            t_down = time.time_ns()
            took = replace(i, old, "downgraded")
            time.sleep(5)
            writes = [(metric_series(http[j], "hale_wire_version") or {}).get(f'node="n{j}"') for j in range(AGENTS)]
            took_up = replace(i, new, "upgraded again")
            print(f"RESULT downgrade agent={names[i]} down_s={took:.1f} up_s={took_up:.1f} changes_of_holder={len(watch.changes)} lease_gaps={len(watch.gaps)} false_deaths={len(watch.false_deaths)} demote_hooks={hook_runs('demote', t_down)} wire_written_while_down={writes}")
        watch.stop = True
        pairs = len(watch.silence)
        worst = max(watch.silence.items(), key=lambda kv: kv[1]) if watch.silence else None
        print(f"RESULT gossip pairs={pairs} of {AGENTS * (AGENTS - 1)} max_silence_ms={worst[1] if worst else None} worst_pair={worst[0] if worst else None} suspect_samples={watch.suspects}")
        print(f"lease samples {watch.samples}; changes {watch.changes[:5]}; gaps {len(watch.gaps)}; false deaths {watch.false_deaths[:5]}; packets by version {v_after}")
        return 0
    finally:
        cleanup()


if __name__ == "__main__":
    sys.exit(main())
