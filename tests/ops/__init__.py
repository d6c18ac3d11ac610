"""What an operator meets: inspect, dashboard, metrics, traces, check, bench, CLI, packaging."""
