"""Requests: parsed, judged in the contract's order, handed to their operation, answered.

The spec's routes and request schemas (`_spec`, `_schema`, `_routing`), credentials, headers,
rate limits and shares (`_auth`, `_headers`, `_ratelimit`, `_shares`), `_api`, which judges
each request and answers it, and `_operations`, the one table from operationId to what runs it
(a transaction of `locks` or `groups`, or a request held open); `_readiness` serves `/readyz`.
"""
