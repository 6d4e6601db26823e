"""Connections: bytes in and out, bounded against clients that misbehave.

uvicorn's httptools protocol with per-connection limits (`_protocol`), the seats (file
descriptors) connections hold (`_seats`), and work paced per turn of the event loop (`_pacing`).
"""
