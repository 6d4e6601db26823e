"""Groups: their rules, their transactions, watching a group, the operations the API serves.

Built on the lock machinery (`locks`: callers, the runner, watches), never the other way.
"""
