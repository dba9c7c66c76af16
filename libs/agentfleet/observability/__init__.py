"""What an operator watches: every metric instrument (named once), their export, traces,
structured logs, the readiness monitor and the event-loop lag watch. Used by every service;
may use config only.
"""
