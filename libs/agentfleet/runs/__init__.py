"""How runs are followed across services: the one LISTEN per process on run events
(`run_watch`), one run's events read once for all its followers (`run_feed`), and
single-flight numbered reads (`shared_reads`, also used by the dispatcher's graph feed).
May use postgres, events and observability. The limits every run obeys are a floor of their
own, `agentfleet.run_limits`, since settings and the graph's task rules read them too.
"""
