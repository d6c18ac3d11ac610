"""The worker: in one process, as real processes, under tenant limits and faults."""
