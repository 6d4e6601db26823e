"""The application: `create_app` builds the parts, `serve` runs them under uvicorn.

`_app` makes every part and hands each what it needs; `_server` adds the listeners, TLS and
SIGTERM's graceful shutdown.
"""
