"""How runs are followed and bounded across services: the one LISTEN per process on run
events (`run_watch`), one run's events read once for all its followers (`run_feed`),
single-flight numbered reads (`shared_reads`), and the limits every run obeys in the
executor and the toolpool alike (`run_limits`). May use postgres, events and observability.
"""
