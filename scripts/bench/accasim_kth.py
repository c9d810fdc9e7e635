#!/usr/bin/env python3
"""Replay an SWF trace (KTH-SP2 by default) in AccaSim under its EASY
backfilling dispatcher with a first-fit allocator, and print one JSON
summary line with the same figures `berth sim swf` prints: jobs counted,
mean wait and mean bounded slowdown (10 s bound).

Job reading follows Berth's `sim/src/swf.rs` unless --stock:
  * processors: field 5 (allocated) when > 0, else field 8 (requested);
  * a line with no run time (field 4 <= 0) or no processors is dropped,
    and so is one asking for more processors than the cluster has;
  * the time limit is field 9 (requested time) when > 0, else the run
    time, and the job runs min(run time, limit): it is killed at its limit.
The trace is rewritten that way into --workdir (outside the timed part) and
read there by AccaSim's own SWF reader, so AccaSim's reading is timed too.
With --stock AccaSim reads the trace as it is: processors from field 8
first, its recorded run time even past the requested time.

The cluster is --hosts nodes of 1 core each (default: the header's
MaxProcs), which is what `berth sim swf --cpus-per-node 1` builds.

--reservation enforced passes the EASY head's reserved nodes to the
allocator during backfill; stock AccaSim 1.1.3 passes an empty list there,
so nothing keeps a backfilled job off the head's nodes (see BENCHMARKS.md).

Metrics are computed here, from each finished job's queued, start and end
times (AccaSim's own "slowdown" is not bounded):
  wait = start - submit;  bsld = max((wait + run) / max(run, 10), 1)
with run = end - start, as in `sim/src/engine.rs`.
"""

import argparse
import collections
import collections.abc
import gzip
import json
import os
import time

# AccaSim 1.1.3 imports `Mapping` from `collections`, which Python 3.10
# removed; give it the one from `collections.abc`.
if not hasattr(collections, "Mapping"):
    collections.Mapping = collections.abc.Mapping

T_START = time.perf_counter()

from accasim.base.additional_data import AdditionalData  # noqa: E402
from accasim.base.allocator_class import FirstFit  # noqa: E402
from accasim.base.scheduler_class import EASYBackfilling  # noqa: E402
from accasim.base.simulator_class import Simulator  # noqa: E402

BSLD_BOUND_S = 10
DEFAULT_TRACE = "/work/shared/traces/KTH-SP2-1996-2.1-cln.swf.gz"


def open_text(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rt")
    return open(path)


def max_procs_of(path):
    with open_text(path) as f:
        for line in f:
            if not line.startswith(";"):
                break
            key, _, value = line[1:].partition(":")
            if key.strip() == "MaxProcs":
                return int(value.strip())
    return None


def prepare_trace(src, dst, hosts, stock):
    """Writes the trace AccaSim will read; returns (kept, dropped)."""
    kept = dropped = 0
    with open_text(src) as f, open(dst, "w") as out:
        for line in f:
            s = line.strip()
            if not s or s.startswith(";"):
                continue
            fields = s.split()
            if len(fields) != 18:
                raise SystemExit(f"{src}: a job line with {len(fields)} fields, not 18: {s!r}")
            if stock:
                out.write(" ".join(fields) + "\n")
                kept += 1
                continue
            num = [int(round(float(x))) for x in fields]
            run, alloc, req_procs, req_time = num[3], num[4], num[7], num[8]
            procs = alloc if alloc > 0 else req_procs
            if run <= 0 or procs <= 0 or procs > hosts:
                dropped += 1
                continue
            limit = req_time if req_time > 0 else run
            num[3] = min(run, limit)
            num[4] = procs
            num[7] = procs
            num[8] = limit
            out.write(" ".join(str(x) for x in num) + "\n")
            kept += 1
    return kept, dropped


class Recorder(AdditionalData):
    """Keeps (submit, start, end) of every job as it leaves the system."""

    def __init__(self, event_manager=None):
        AdditionalData.__init__(self, event_manager)
        self.done = []

    def exec_before_dispatching(self, *args, **kwargs):
        pass

    def exec_after_dispatching(self, *args, **kwargs):
        pass

    def exec_before_submission(self, *args, **kwargs):
        pass

    def exec_after_submission(self, *args, **kwargs):
        pass

    def exec_before_completion(self, *args, **kwargs):
        pass

    def exec_after_completion(self, removed_jobs):
        for e in removed_jobs:
            self.done.append((e.queued_time, e.start_time, e.end_time))

    def stop(self):
        pass


class ReservingFirstFit(FirstFit):
    """First fit that, when asked to backfill with an empty reserved-node
    list, uses the nodes the EASY scheduler actually reserved."""

    name = "FF"

    def __init__(self, seed=0, **kwargs):
        FirstFit.__init__(self, seed, **kwargs)
        self.scheduler = None

    def allocating_method(self, es, cur_time, skip=False, reserved_time=None, reserved_nodes=None):
        if reserved_time is not None and not reserved_nodes and self.scheduler is not None:
            reserved_nodes = list(self.scheduler._reserved_slot[1])
        return FirstFit.allocating_method(
            self, es, cur_time, skip=skip, reserved_time=reserved_time, reserved_nodes=reserved_nodes
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--hosts", type=int, help="nodes of 1 core (default: MaxProcs)")
    ap.add_argument("--workdir", default="/tmp/accasim-kth")
    ap.add_argument("--stock", action="store_true", help="AccaSim's own SWF reading")
    ap.add_argument("--reservation", choices=["stock", "enforced"], default="stock")
    args = ap.parse_args()

    hosts = args.hosts or max_procs_of(args.trace)
    if not hosts:
        raise SystemExit(f"{args.trace}: no '; MaxProcs:' header; give --hosts")
    os.makedirs(args.workdir, exist_ok=True)
    workload = os.path.join(args.workdir, "stock.swf" if args.stock else "berth-rules.swf")
    t0 = time.perf_counter()
    kept, dropped = prepare_trace(args.trace, workload, hosts, args.stock)
    prepare_s = time.perf_counter() - t0

    sys_config = os.path.join(args.workdir, "sys_config.json")
    with open(sys_config, "w") as f:
        json.dump(
            {
                "groups": {"node": {"core": 1}},
                "resources": {"node": hosts},
                "equivalence": {"processor": {"core": 1}},
                "start_time": 0,
            },
            f,
        )

    t1 = time.perf_counter()
    if args.reservation == "enforced":
        allocator = ReservingFirstFit()
    else:
        allocator = FirstFit()
    dispatcher = EASYBackfilling(allocator)
    if args.reservation == "enforced":
        allocator.scheduler = dispatcher
    sim = Simulator(
        workload,
        sys_config,
        dispatcher,
        # A class, not an instance: AccaSim 1.1.3 hands an instance its
        # event manager before it has made one (and fails an assertion).
        additional_data=[Recorder],
        RESULTS_FOLDER_PATH=os.path.join(args.workdir, "results"),
        scheduling_output=False,
        pprint_output=False,
        benchmark_output=False,
        statistics_output=False,
        show_statistics=False,
        LOG_LEVEL="WARNING",
    )
    recorder = sim.mapper.additional_data[0]
    sim.start_simulation()
    sim_s = time.perf_counter() - t1
    internal_s = sim.end_simulation_time - sim.start_simulation_time

    waits, bslds = [], []
    for submit, start, end in recorder.done:
        wait = start - submit
        run = end - start
        waits.append(wait)
        bslds.append(max((wait + run) / max(run, BSLD_BOUND_S), 1.0))
    n = len(recorder.done)
    print(
        json.dumps(
            {
                "event": "summary",
                "tool": "accasim",
                "reading": "stock" if args.stock else "berth-rules",
                "reservation": args.reservation,
                "hosts": hosts,
                "lines_kept": kept,
                "lines_dropped": dropped,
                "loaded": sim.loaded_jobs,
                "rejected": sim.rejected_jobs,
                "jobs": n,
                "mean_wait_s": round(sum(waits) / n, 6) if n else 0.0,
                "mean_bsld": round(sum(bslds) / n, 6) if n else 0.0,
                "prepare_s": round(prepare_s, 3),
                "sim_s": round(sim_s, 3),
                "sim_loop_s": round(internal_s, 3),
                "startup_s": round(t0 - T_START, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
