#!/usr/bin/env python3
"""Times `berth sim swf` against AccaSim (scripts/bench/accasim_kth.py) on
the same SWF trace, alternating them (berth, accasim, ..., berth, accasim,
...), each under /usr/bin/time -v, and prints a Markdown table: wall and CPU
time, max RSS, the load average when each run started, and each tool's jobs
counted, mean wait and mean bounded slowdown; then the ratios to Berth.

--extra adds, in each round, AccaSim with the EASY reservation enforced
(`accasim-enforced`), AccaSim reading the trace its own way
(`accasim-own-reading`) and the independent EASY replays of
scripts/bench/easy_reference.py (`ref-count`, `ref-free-first`).

Run it under `nice -n 19` on a shared machine; the children inherit it:
  nice -n 19 python3 scripts/bench/sim_vs_accasim.py \
      --berth /work/target-accasim/release/berth
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TRACE = "/work/shared/traces/KTH-SP2-1996-2.1-cln.swf.gz"


def timed(cmd):
    """Runs cmd under /usr/bin/time -v; returns (summary JSON, figures)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        load = os.getloadavg()[0]
        p = subprocess.run(
            ["/usr/bin/time", "-v", "-o", tf.name] + cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        rusage = tf.read()
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}")
    summary = None
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            obj = json.loads(line)
            if obj.get("event") == "summary":
                summary = obj
    if summary is None:
        raise SystemExit(f"{' '.join(cmd)} printed no summary line:\n{p.stdout[-2000:]}")

    def field(label):
        m = re.search(r"^\s*" + re.escape(label) + r":\s*(.+)$", rusage, re.M)
        if not m:
            raise SystemExit(f"no {label!r} in /usr/bin/time output:\n{rusage}")
        return m.group(1).strip()

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    figures = {
        "wall_s": secs,
        "user_s": float(field("User time (seconds)")),
        "sys_s": float(field("System time (seconds)")),
        "rss_mb": int(field("Maximum resident set size (kbytes)")) / 1024,
        "load": load,
    }
    return summary, figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--berth", default=os.environ.get("BERTH", "berth"))
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--cpus-per-node", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/accasim-kth")
    ap.add_argument("--extra", action="store_true", help="also the variants and references")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()

    berth_cmd = [
        args.berth, "sim", "swf", "--trace", args.trace,
        "--cpus-per-node", str(args.cpus_per_node),
    ]
    acc = [args.python, os.path.join(HERE, "accasim_kth.py"), "--trace", args.trace]
    tools = [
        ("berth", berth_cmd),
        ("accasim", acc + ["--workdir", args.workdir, "--reservation", "stock"]),
    ]
    if args.extra:
        ref = [args.python, os.path.join(HERE, "easy_reference.py"), "--trace", args.trace]
        tools += [
            ("accasim-enforced", acc + ["--workdir", args.workdir + "-enforced", "--reservation", "enforced"]),
            ("accasim-own-reading", acc + ["--workdir", args.workdir + "-stock", "--stock"]),
            ("ref-count", ref + ["--hosts-choice", "count"]),
            ("ref-free-first", ref + ["--hosts-choice", "free-first"]),
        ]
    for tool, cmd in tools:
        print(f"{tool}: `{' '.join(cmd)}`")
    print()
    rows = []
    for r in range(1, args.rounds + 1):
        for tool, cmd in tools:
            summary, fig = timed(cmd)
            if tool == "berth":
                inner = summary["sim_wall_ms"] / 1000.0
            elif tool.startswith("accasim"):
                inner = summary["sim_s"]
            else:
                inner = summary["wall_s"]
            rows.append((tool, r, summary, fig, inner))
            print(
                f"round {r} {tool}: wall {fig['wall_s']:.2f} s, "
                f"jobs {summary['jobs']}, wait {summary['mean_wait_s']:.1f}, "
                f"bsld {summary['mean_bsld']:.2f}",
                file=sys.stderr,
                flush=True,
            )

    print("| round | tool | wall | user+sys CPU | replay only | max RSS | load (1 min) | jobs | mean wait | mean BSLD |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tool, r, s, f, inner in rows:
        print(
            f"| {r} | {tool} | {f['wall_s']:.2f} s | {f['user_s'] + f['sys_s']:.2f} s "
            f"| {inner:.2f} s | {f['rss_mb']:.0f} MB | {f['load']:.2f} | {s['jobs']} "
            f"| {s['mean_wait_s']:.1f} s | {s['mean_bsld']:.2f} |"
        )
    print()

    def med(tool, key):
        vals = []
        for t, _, _, f, inner in rows:
            if t == tool:
                vals.append(inner if key == "inner" else (f["user_s"] + f["sys_s"] if key == "cpu" else f[key]))
        return statistics.median(vals)

    print("| median over rounds | wall | / Berth | user+sys CPU | / Berth | replay only | / Berth |")
    print("|---|---|---|---|---|---|---|")
    for tool, _ in tools:
        cells = []
        for key in ("wall_s", "cpu", "inner"):
            v = med(tool, key)
            b = med("berth", key)
            ratio = f"{v / b:.2f}x" if b > 0 else "n/a"
            cells.append(f"{v:.2f} s | {ratio}")
        print(f"| {tool} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
