"""What the suites share: helpers, fixtures' building blocks, and the apps, handlers and
processes the tests run in subprocesses or under uvicorn."""
