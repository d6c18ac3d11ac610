"""The worker: runs handlers for tasks under leases, talking only to a work queue."""

from .worker import Worker

__all__ = ["Worker"]
