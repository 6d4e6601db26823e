"""What the server reports about itself; imports no other part of the server.

Prometheus metrics (`_metrics`, `_lockmetrics`), the access log (`_accesslog`), the log format
(`_logs`) and OpenTelemetry spans (`_tracing`).
"""
