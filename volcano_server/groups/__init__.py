"""Groups: their rules, their transactions, and reading a group for its watchers.

Built on the lock machinery (`locks`: callers, the runner, watches), never the other way.
"""
