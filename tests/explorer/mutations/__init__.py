"""Broken rules kept as patches, to show the schedule explorer catches each one.

A safety net is only as good as what it catches: each `*.patch` here is a small unified diff
against `volcano_server/` that breaks one rule of docs/safety.md on purpose. `python -m
tests.explorer.mutations` copies the checkout to a scratch directory for each, applies the
patch there, runs the explorer with CI's budget (or `--explore N`) and prints a table: the rule
broken, whether the explorer caught it on each backend, by which check, and the seconds it took
to find (Hypothesis does not shrink in these runs, so the time is the search's alone).
"""

from __future__ import annotations

from pathlib import Path

import attrs

__all__ = ["HERE", "MUTATIONS", "Mutation"]

HERE = Path(__file__).parent


@attrs.frozen
class Mutation:
    """One broken rule: its patch (`name`.patch) and the rule it breaks."""

    name: str
    rule: str

    @property
    def patch(self) -> Path:
        return HERE / f"{self.name}.patch"


MUTATIONS = (
    Mutation(
        "replay_without_liveness",
        "3: a replayed acquire or renew answers the stored lease without checking it is live",
    ),
    Mutation(
        "clock_before_row_lock",
        "5: PostgreSQL reads the clock before it locks the key's row (volcano_open)",
    ),
    Mutation(
        "release_ignores_fencing_token",
        "8: a release ends the owner's live lease, whatever fencing token it names",
    ),
    Mutation(
        "release_ignores_owner_token",
        "1: a release ends the lease of the fencing token it names, whatever owner token it sends",
    ),
    Mutation(
        "watch_answers_the_version_it_named",
        "13: every read answers every watcher, the version it named included",
    ),
    Mutation(
        "watch_answered_from_an_older_read",
        "13: a new watcher is answered from the last read whenever its version differs, older"
        " than the one named included",
    ),
    Mutation(
        "own_changes_wake_no_watcher",
        "13: a change this server's own transaction made wakes none of its watchers",
    ),
    Mutation(
        "state_names_leases_ended_a_second_ago",
        "12: SQLite: a key's state names leases that ended up to a second before its read",
    ),
)
