"""The ``mcp`` scenario's figures: per run, per phase, and as lines of the printed table."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ._mcp_settings import McpSettings
from ._mcp_systems import McpSystem
from ._progress import percentile

__all__ = ["figures", "mcp_lines"]


def _usage(cpu: dict[str, float | None], count: int, span: float, unit: str) -> dict[str, Any]:
    """CPU µs per ``unit`` and cores kept busy, per part (None where unknown)."""
    out: dict[str, Any] = {}
    for part, seconds in cpu.items():
        if seconds is None:
            continue
        out[f"{part}_us_per_{unit}"] = round(seconds / max(count, 1) * 1e6)
        out[f"{part}_cores"] = round(seconds / span, 2)
    return out


def _lat(samples: list[float], prefix: str = "") -> dict[str, float | None]:
    if not samples:
        return {f"{prefix}p50": None, f"{prefix}p99": None}
    return {
        f"{prefix}p50": round(percentile(samples, 0.5), 2),
        f"{prefix}p99": round(percentile(samples, 0.99), 2),
    }


def figures(
    system: McpSystem,
    settings: McpSettings,
    life: dict[str, Any],
    get: dict[str, Any],
    call: dict[str, Any],
    library: dict[str, Any] | None,
) -> dict[str, Any]:
    n = settings.tasks
    completed = len(life["latency_ms"])
    out: dict[str, Any] = {
        "system": system.name,
        **{k: v for k, v in asdict(settings).items() if not k.startswith("peer")},
        "rate": round(completed / life["span"]),
        **_lat(life["latency_ms"]),
        **_lat(life["create_ms"], "create_"),
        "completed": completed,
        "errors": sum(life["errors"].values()),
        "error_kinds": life["errors"],
        "lost": life["lost"] + max(0, n - life["done"]),
        "polls_per_task": round(life["polls"] / max(n, 1), 2),
        **_usage(life["cpu"], n, life["span"], "task"),
    }
    for key, phase, unit in (("get", get, "poll"), ("sdk_call", call, "call")):
        row: dict[str, Any] = {
            "rate": round(phase["done"] / phase["span"]),
            **_lat(phase["latency_ms"]),
            "errors": sum(phase["errors"].values()),
            "error_kinds": phase["errors"],
            **_usage(phase["cpu"], phase["done"], phase["span"], unit),
        }
        server_us = row.get(f"servers_us_per_{unit}")
        if server_us:
            # What one fully busy server core would serve.
            row["per_server_core"] = round(1e6 / server_us)
        out[key] = row
    if library is not None:
        out["library"] = library
        get_us = out["get"].get("servers_us_per_poll")
        call_us = out["sdk_call"].get("servers_us_per_call")
        if get_us:
            share = min(1.0, library["library_us"] / get_us)
            out["share"] = {
                "library": round(share, 3),
                "sdk_http": round(1 - share, 3),
                "library_us": library["library_us"],
                "sdk_http_us": round(get_us - library["library_us"], 1),
                "get_minus_sdk_call_us": None if not call_us else round(get_us - call_us),
            }
    return out


def _cpu(row: dict[str, Any], unit: str) -> str:
    parts = [
        f"{name} {row[f'{key}_us_per_{unit}']}"
        for key, name in (
            ("servers", "servers"),
            ("workers", "workers"),
            ("redis", "Redis"),
            ("clients", "clients"),
        )
        if f"{key}_us_per_{unit}" in row
    ]
    return " + ".join(parts) if parts else "-"


def mcp_lines(row: dict[str, Any]) -> list[str]:
    """The ``mcp`` scenario's figures as lines of the printed table."""
    lines = [
        f"mcp ({row['system']}, {row['servers']} servers, {row['workers']} workers, "
        f"{row['clients']} clients, poll {row['poll_ms']} ms): {row['rate']} tasks/s; "
        f"create-to-terminal p50 {row['p50']} / p99 {row['p99']} ms; tools/call "
        f"p50 {row['create_p50']} / p99 {row['create_p99']} ms; errors {row['errors']}, "
        f"lost {row['lost']}; {row['polls_per_task']} polls/task",
        f"  CPU us/task: {_cpu(row, 'task')}",
    ]
    get, call = row["get"], row["sdk_call"]
    lines.append(
        f"  tasks/get, {row['pollers']} pollers: {get['rate']} polls/s "
        f"(p50 {get['p50']} / p99 {get['p99']} ms), {get.get('per_server_core', '-')} per "
        f"server core; CPU us/poll: {_cpu(get, 'poll')}; errors {get['errors']}"
    )
    lines.append(
        f"  SDK tools/call of a plain tool: {call['rate']} calls/s "
        f"(p50 {call['p50']} / p99 {call['p99']} ms), {call.get('per_server_core', '-')} per "
        f"server core; CPU us/call: {_cpu(call, 'call')}; errors {call['errors']}"
    )
    library, share = row.get("library"), row.get("share")
    if library and share:
        lines.append(
            f"  a tasks/get's server CPU: library {share['library_us']} us "
            f"({share['library']:.0%}: authorize {library['authorize_us']} + find_task "
            f"{library['find_task_us']} + render {library['render_us']}), SDK and HTTP "
            f"{share['sdk_http_us']} us ({share['sdk_http']:.0%})"
        )
    ratios = row.get("ours_over_it")
    if ratios:
        parts = ", ".join(f"{name} {value}x" for name, value in ratios.items())
        lines.append(f"  redis-tasks vs {row['system']} (above 1: ours better): {parts}")
    fastmcp = row.get("fastmcp_ours_over_it")
    if fastmcp:
        parts = ", ".join(f"{name} {value}x" for name, value in fastmcp.items())
        lines.append(f"  FastMCP + redis-tasks vs {row['system']} (above 1: ours better): {parts}")
    return lines
