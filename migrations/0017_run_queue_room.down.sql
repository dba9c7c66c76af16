-- The older executors take the same advisory lock in a statement of their own.
DROP FUNCTION kb.run_queue_has_room(text, integer);
