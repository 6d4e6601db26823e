"""Requests: parsed, judged in the contract's order, handed to their operation, answered.

The spec's routes and request schemas (`_spec`, `_schema`, `_routing`), credentials, headers,
rate limits and shares (`_auth`, `_headers`, `_ratelimit`, `_shares`), and `_api`, which judges
each request and turns its operation's outcome into an answer; `_readiness` serves `/readyz`.
"""
