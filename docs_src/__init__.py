"""The documentation site's code: every file here is shown by a page and run or built by
the tests (``tests/ops/test_readme.py``), so no example in the docs can rot."""
