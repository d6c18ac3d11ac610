"""The Redis backend itself: scripts, pipelining, retries, and many processes on one server."""
