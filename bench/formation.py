#!/usr/bin/env python3
"""How long three agents started together take to form, when the seed the others
join through starts last (a boot, a rolling restart: the order is not up to you).

Each round: n1 and n2 start with `seeds = [n0]`; n0 (no seeds) starts DELAY seconds
later; the round ends when every agent lists all three alive (`GET /v1/members`).
Prints each round and the median; loopback only; the agents are killed by pid.

Usage: bench/formation.py [--hale target/release/hale] [--rounds 10] [--delay 0.3]
"""
import argparse, json, os, shutil, socket, statistics, subprocess, tempfile, time, urllib.request

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def alive(http):
    try:
        with urllib.request.urlopen(f"http://{http}/v1/members", timeout=1) as r:
            members = json.load(r)
        if isinstance(members, dict):
            members = members.get("members", [])
        return sum(1 for m in members if m.get("state") == "alive")
    except Exception:
        return 0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hale", default="target/release/hale")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--delay", type=float, default=0.3)
    a = ap.parse_args()
    key = subprocess.run([a.hale, "keygen"], capture_output=True, text=True, check=True).stdout.strip()
    took = []
    for r in range(a.rounds):
        d = tempfile.mkdtemp(prefix="hale-formation-")
        nodes = [(f"n{i}", free_port(), free_port()) for i in range(3)]
        seed = f"127.0.0.1:{nodes[0][1]}"
        procs = []
        try:
            def start(i):
                name, g, h = nodes[i]
                seeds = "" if i == 0 else f'"{seed}"'
                cfg = os.path.join(d, f"{name}.toml")
                with open(cfg, "w") as f:
                    f.write(f'[agent]\nname = "{name}"\nbind = "127.0.0.1:{g}"\nhttp = "127.0.0.1:{h}"\n'
                            f'seeds = [{seeds}]\n[cluster]\nname = "formation-{os.getpid()}-{r}"\nkeys = ["{key}"]\n')
                log = open(os.path.join(d, f"{name}.log"), "w")
                procs.append(subprocess.Popen([a.hale, "agent", "-c", cfg], stdout=log, stderr=log))
            start(1); start(2)
            time.sleep(a.delay)
            t0 = time.monotonic()
            start(0)
            deadline = t0 + 30
            while time.monotonic() < deadline:
                if all(alive(f"127.0.0.1:{h}") == 3 for _, _, h in nodes):
                    break
                time.sleep(0.02)
            t = time.monotonic() - t0
            took.append(t)
            print(f"round {r}: formed {t:.2f} s after the seed started", flush=True)
        finally:
            for p in procs:
                p.kill(); p.wait()
            shutil.rmtree(d, ignore_errors=True)
    print(f"RESULT rounds={len(took)} median={statistics.median(took):.2f}s "
          f"min={min(took):.2f}s max={max(took):.2f}s")

if __name__ == "__main__":
    main()
