"""Keys and labels the adapters build from names the frameworks give (task names, hosts).

Framework names may hold characters a key refuses (`/`, spaces, `@`); arguments can be any
size. A key keeps the readable part of the name, cleaned and cut, and a digest of everything
that identifies the work, so two different works never share a key by cleaning or cutting.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

MAX_KEY = 255
MAX_LABEL = 200
_NOT_IN_KEY = re.compile(r"[^A-Za-z0-9._:-]+")
_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e]+")
_DIGEST_HEX = 32  # 128 bits of SHA-256: no two works share a key by chance


def clean_name(name: str) -> str:
    """`name` with every run of characters a key refuses turned into `_` (never empty).

    Only for the part of a key after its prefix: a key's first character must be a letter or
    a digit, and `_` may stand anywhere else.
    """
    return _NOT_IN_KEY.sub("_", name) or "_"


def digest(value: Any) -> str:
    """A stable hex digest of a JSON-able value (other values by their `repr`)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_HEX]


def work_key(prefix: str, name: str, identity: Any) -> str:
    """`prefix:name:digest`, a valid key of at most 255 characters for the work `identity`.

    The digest covers `name` and `identity` whole, so cutting a long name loses no identity.
    """
    tail = ":" + digest([name, identity])
    room = MAX_KEY - len(prefix) - 1 - len(tail)
    return f"{prefix}:{clean_name(name)[:room]}{tail}"


def label(*parts: object) -> str:
    """A lease label from `parts` joined by `:`: printable ASCII, at most 200 characters."""
    text = ":".join(str(part) for part in parts if part is not None and part != "")
    return _NOT_PRINTABLE.sub("?", text)[:MAX_LABEL]
