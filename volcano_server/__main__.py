"""`python -m volcano_server` is `volcano-server`."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
