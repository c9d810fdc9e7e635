#!/usr/bin/env python3
"""A small, independent EASY backfilling replay of an SWF trace on hosts of
1 CPU, to tell apart why `berth sim swf` and AccaSim disagree. It reads jobs
exactly as Berth does (see accasim_kth.py) and keeps Berth's instants (at
each submit or end: ends, then submits in file order, then one pass).

A pass starts queued jobs in submit order while they fit. The first that
does not fit (the head) gets a reservation at the shadow time, the earliest
expected end (start + time limit) of running jobs by which enough hosts are
free; jobs behind it start now if they fit and either end by the shadow
time or use only "extra" hosts (free at the shadow time beyond the head's
need), which they then use up.

--hosts-choice picks how hosts are counted:
  count       textbook EASY: hosts are interchangeable (Mu'alem & Feitelson);
  free-first  the head's reservation holds specific hosts, those free soonest
              first (free now, then by expected end, then by index), and
              a job starts on the lowest-numbered free hosts. The
              reservation's choice is what `Pool::earliest_room` does with
              1-CPU hosts; with this placement the replay gives Berth's
              KTH-SP2 figures exactly (BENCHMARKS.md).

Prints one JSON line: jobs, mean wait, mean bounded slowdown (10 s bound).
"""

import argparse
import gzip
import heapq
import json
import time

DEFAULT_TRACE = "/work/shared/traces/KTH-SP2-1996-2.1-cln.swf.gz"


def read_jobs(path):
    opener = gzip.open if path.endswith(".gz") else open
    max_procs = None
    jobs = []
    with opener(path, "rt") as f:
        for line in f:
            s = line.strip()
            if not s:
                continue
            if s.startswith(";"):
                key, _, value = s[1:].partition(":")
                if key.strip() == "MaxProcs":
                    max_procs = int(value.strip())
                continue
            num = [int(round(float(x))) for x in s.split()]
            run, alloc, req_procs, req_time = num[3], num[4], num[7], num[8]
            procs = alloc if alloc > 0 else req_procs
            if run <= 0 or procs <= 0:
                continue
            limit = req_time if req_time > 0 else run
            jobs.append((num[1], procs, min(run, limit), limit))
    return max_procs, [j for j in jobs if j[1] <= max_procs]


def replay(jobs, hosts, choice):
    n = len(jobs)
    start = [None] * n
    end = [None] * n
    queue = []  # job indices in submit order
    ends = []  # heap of (actual end, job)
    # Per host: the job on it, or None (free-first only).
    on_host = [None] * hosts
    held = {}  # job -> hosts it runs on (free-first only)
    free = hosts
    running = set()
    nxt = 0
    while nxt < n or ends or queue:
        t = min(jobs[nxt][0] if nxt < n else float("inf"), ends[0][0] if ends else float("inf"))
        while ends and ends[0][0] == t:
            _, j = heapq.heappop(ends)
            running.discard(j)
            free += jobs[j][1]
            if choice == "free-first":
                for h in held.pop(j):
                    on_host[h] = None
        while nxt < n and jobs[nxt][0] == t:
            queue.append(nxt)
            nxt += 1

        def begin(j, hs=None):
            nonlocal free
            start[j] = t
            end[j] = t + jobs[j][2]
            free -= jobs[j][1]
            running.add(j)
            heapq.heappush(ends, (end[j], j))
            if choice == "free-first":
                if hs is None:
                    hs = [h for h in range(hosts) if on_host[h] is None]
                hs = hs[: jobs[j][1]]
                for h in hs:
                    on_host[h] = j
                held[j] = hs

        i = 0
        while i < len(queue) and jobs[queue[i]][1] <= free:
            begin(queue[i])
            i += 1
        rest = queue[i:]
        if rest:
            head = rest[0]
            need = jobs[head][1]
            if choice == "count":
                avail = free
                shadow = t
                for e, j in sorted((start[j] + jobs[j][3], j) for j in running):
                    if avail >= need:
                        break
                    avail += jobs[j][1]
                    shadow = e
                extra = avail - need
                reserved = None
            else:
                order = sorted(
                    range(hosts),
                    key=lambda h: (
                        t if on_host[h] is None else start[on_host[h]] + jobs[on_host[h]][3],
                        h,
                    ),
                )
                reserved = set(order[:need])
                shadow = max(
                    t if on_host[h] is None else start[on_host[h]] + jobs[on_host[h]][3]
                    for h in reserved
                )
            left = [head]
            for j in rest[1:]:
                procs, limit = jobs[j][1], jobs[j][3]
                if procs > free:
                    left.append(j)
                    continue
                in_time = t + limit <= shadow
                if choice == "count":
                    if in_time or procs <= extra:
                        if not in_time:
                            extra -= procs
                        begin(j)
                        continue
                else:
                    usable = [h for h in range(hosts) if on_host[h] is None and (in_time or h not in reserved)]
                    if len(usable) >= procs:
                        begin(j, usable)
                        continue
                left.append(j)
            queue = left
        else:
            queue = []
    waits = [start[j] - jobs[j][0] for j in range(n)]
    bslds = [
        max((end[j] - jobs[j][0]) / max(end[j] - start[j], 10), 1.0) for j in range(n)
    ]
    return n, sum(waits) / n, sum(bslds) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--hosts-choice", choices=["count", "free-first"], default="count")
    args = ap.parse_args()
    t0 = time.perf_counter()
    hosts, jobs = read_jobs(args.trace)
    n, wait, bsld = replay(jobs, hosts, args.hosts_choice)
    print(
        json.dumps(
            {
                "event": "summary",
                "tool": "easy_reference",
                "hosts_choice": args.hosts_choice,
                "hosts": hosts,
                "jobs": n,
                "mean_wait_s": round(wait, 6),
                "mean_bsld": round(bsld, 6),
                "wall_s": round(time.perf_counter() - t0, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
