"""The management commands of `volcano.integrations.django`."""
