"""Answers as the contract spells them: JSON bodies, RFC 3339 timestamps and error answers."""
