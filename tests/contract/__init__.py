"""The task-manager and work-queue contracts on every backend, and what they refuse."""
