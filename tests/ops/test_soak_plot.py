"""The soak's plot: a well-formed SVG with a line per series in each of its four panels."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from benchmarks.soak_plot import plot


def test_the_plot_draws_every_series_of_a_cluster_soak() -> None:
    result = {
        "minutes": 1,
        "rate": 300,
        "created": 18_000,
        "seconds": [0.0, 10.0, 20.0],
        "used_memory_mib_by_primary": [[5.0, 5.1, 5.2], [9.0, 9.2, 9.1], [9.5, 9.3, 9.4]],
        "keys_by_primary": [[10, 12, 11], [400, 410, 405], [420, 415, 418]],
        "events_length": [0, 900, 1000],
        "work_length": [0, 2, 1],
        "worker_rss_mib": [[60.0, 61.0], [60.5, 61.2], [60.4, 61.1]],
    }
    svg = ET.fromstring(plot(result, "cluster"))
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    # 3 primaries' memory, 3 primaries' keys, 2 streams, 2 workers.
    assert len(lines) == 10
    assert all(len(line.attrib["points"].split()) == 3 for line in lines)
    texts = "".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    assert "Soak on cluster" in texts
    assert "9.5 MiB" in texts
