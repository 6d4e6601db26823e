"""`python -m volcano` is the `volcano` command."""

from __future__ import annotations

import sys

from volcano._cli import main

if __name__ == "__main__":
    sys.exit(main())
