"""`locked_migrate`."""
