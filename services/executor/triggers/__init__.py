"""Agents that react: trigger grammar, the event outbox and its consumer, schedules, and
TriggerService (issue 32).

``grammar`` (pure: what a definition's ``trigger`` and ``config.trigger_*`` may say, and the
input a firing gives its run) is used by the registry at write time and by the consumer;
``store`` holds every statement on the outbox, firings and schedules; ``consumer`` and
``ticker`` are the executor's background loops; ``server`` is TriggerService.
"""
