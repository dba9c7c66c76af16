"""WatchRun fan-out: one run, ``--watchers`` streams on one history server process.

Starts the history service as its own process, opens the WatchRun streams from this
process, spread over channels of their own connection each (at least 8, at most half the
server's per-connection stream limit on each: past the limit gRPC queues a connection's
new streams until others end, and watchers never end), waits until every watcher has the
first event (so all are subscribed), then appends ``--events`` events one transaction at a
time with :func:`agentfleet.events.append_events`, ``--rate`` per second. Latency is from
the append's commit returning here to the event arriving at each watcher (same clock), so
it includes the NOTIFY, the server's read and send, and this process's own scheduling of
500 streams.
The limits it runs with are printed: every watcher uses one token of one project, so the
per-token and per-project caps on open streams (AGENTFLEET_MAX_STREAMS_PER_TOKEN, 64, and
AGENTFLEET_MAX_STREAMS_PER_PROJECT, 128 by default) are raised for this server, as an
operator who shows one run to hundreds of people on one process sets them; the defaults
keep one project's watchers from taking the server-wide cap from the others. Deliveries
per second are paced by ``--rate`` (events appended per second, times the watchers): not a capacity.

``python bench/watch_fanout.py [--watchers 500] [--events 100] [--json out.json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from agentfleet import events as ev
from agentfleet.auth import TokenStore
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.settings.server_limits import ServerLimits
from agentfleet.testing.factories import insert_run
from agentfleet.testing.services import start_process_stack
from agentfleet.v1 import history_pb2, history_pb2_grpc
from bench._common import bench_database, machine, percentile, report, scratch_folder

PROJECT = "bench"
MIN_CHANNELS = 8
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
"""A channel with its own connection: gRPC otherwise shares one between the channels of
one target and options, and all streams would go over it."""
STREAMS_PER_TOKEN = 100_000
STREAMS_PER_PROJECT = 100_000


def channel_count(watchers: int, per_connection: int) -> int:
    """Channels to spread ``watchers`` over, at most half ``per_connection`` on each."""
    return max(MIN_CHANNELS, -(-watchers // max(1, per_connection // 2)))


async def measure(url: str, args: argparse.Namespace) -> dict[str, object]:
    pool = await db.create_pool(url, min_size=2, max_size=4)
    run = await insert_run(pool, project_id=PROJECT, agent_name="watched", status="running")
    run_id, root = str(run["id"]), str(run["root_run_id"])
    token = (await TokenStore(pool).create(project_id=PROJECT, role="member")).token
    service = (
        await TokenStore(pool).create(project_id=None, role="service", service="history")
    ).token
    stack = await start_process_stack(
        database_url=url,
        log_dir=scratch_folder("agentfleet-bench-watch-"),
        names=("history",),
        environ={
            "AGENTFLEET_SERVICE_TOKEN": service,
            "AGENTFLEET_LOG_LEVEL": "warning",
            # Every watcher uses one token of one project: lift both stream caps.
            "AGENTFLEET_MAX_STREAMS_PER_TOKEN": str(STREAMS_PER_TOKEN),
            "AGENTFLEET_MAX_STREAMS_PER_PROJECT": str(STREAMS_PER_PROJECT),
        },
    )
    limits = ServerLimits()
    count = channel_count(args.watchers, limits.max_streams_per_connection)
    channels = [
        open_channel(stack.addresses["history"], token=token, options=OWN_CONNECTION)
        for _ in range(count)
    ]
    total = args.events + 1
    received: list[dict[int, float]] = [{} for _ in range(args.watchers)]
    all_first = asyncio.Event()
    firsts = 0

    async def append(step: int) -> tuple[int, float]:
        async with pool.acquire() as conn:
            (stored,) = await ev.append_events(
                conn,
                project_id=PROJECT,
                run_id=run_id,
                root_run_id=root,
                events=[ev.ModelText(agent_name="watched", text=f"event {step}", step=step)],
            )
        return stored.seq, time.perf_counter()

    async def watch(i: int) -> None:
        nonlocal firsts
        api = history_pb2_grpc.HistoryServiceStub(channels[i % count])
        mine = received[i]
        stream = api.WatchRun(history_pb2.WatchRunRequest(project_id=PROJECT, run_id=run_id))
        async for event in stream:
            mine[event.seq] = time.perf_counter()
            if len(mine) == 1:
                firsts += 1
                if firsts == args.watchers:
                    all_first.set()
            if len(mine) == total:
                stream.cancel()
                return

    try:
        await append(0)  # the event every watcher must see before the timed phase
        began = time.perf_counter()
        watchers = [asyncio.create_task(watch(i)) for i in range(args.watchers)]
        async with asyncio.timeout(120):
            await all_first.wait()
        subscribe_s = time.perf_counter() - began
        committed: dict[int, float] = {}
        began = time.perf_counter()
        for step in range(1, total):
            seq, at = await append(step)
            committed[seq] = at
            await asyncio.sleep(1 / args.rate)
        async with asyncio.timeout(120):
            await asyncio.gather(*watchers)
        elapsed = max(max(m.values()) for m in received) - began
    finally:
        for channel in channels:
            await channel.close()
        await stack.stop(grace_s=5.0)
        await pool.close()
    latencies = [m[seq] - at for m in received for seq, at in committed.items()]
    delivered = len(latencies)
    return {
        "watchers": args.watchers,
        "events": args.events,
        "rate": args.rate,
        "subscribe_all_s": subscribe_s,
        "deliveries": delivered,
        "deliveries_per_s": delivered / elapsed,
        "latency_ms": {
            "p50": percentile(latencies, 50) * 1000,
            "p90": percentile(latencies, 90) * 1000,
            "p99": percentile(latencies, 99) * 1000,
            "mean": statistics.fmean(latencies) * 1000,
        },
        "lines": [report(f"WatchRun commit -> {args.watchers} watchers", latencies)],
        "limits": (
            f"limits: {count} connections of at most {-(-args.watchers // count)} streams "
            f"(AGENTFLEET_GRPC_MAX_STREAMS_PER_CONNECTION {limits.max_streams_per_connection}, "
            f"the default); AGENTFLEET_MAX_STREAMS_PER_TOKEN raised to {STREAMS_PER_TOKEN} "
            f"(one token for every watcher; default {limits.max_streams_per_token}); "
            f"AGENTFLEET_MAX_STREAMS_PER_PROJECT raised to {STREAMS_PER_PROJECT} "
            f"(one project; default {limits.max_streams_per_project}); "
            f"AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS {limits.max_concurrent_rpcs}, the default"
        ),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watchers", type=int, default=500)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0, help="events appended per second")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    async with bench_database("watch") as url:
        out = await measure(url, args)
    print(f"machine: {machine()}")
    print(out["limits"])
    for line in out["lines"]:  # type: ignore[union-attr]
        print(line)
    print(
        f"{'all ' + str(args.watchers) + ' watchers subscribed in':<48} "
        f"{out['subscribe_all_s']:8.2f} s"
    )
    print(
        f"{'deliveries (' + str(out['deliveries']) + ')':<48} "
        f"{out['deliveries_per_s']:8.0f} events/s delivered (paced by --rate {args.rate:g}/s)"
    )
    if args.json:
        args.json.write_text(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
