"""Locks: decided, stored in one transaction each, waited for, watched.

The rules as pure decisions (`_rules`), each operation one transaction (`_transactions`,
`_batch`), the waiting requests (`_registry`, `_waiters`), watches (`_watching`), where storage
work runs (`_offload`, `_lanes`, `_admission`) and this server's heartbeat (`_pulse`).
"""
