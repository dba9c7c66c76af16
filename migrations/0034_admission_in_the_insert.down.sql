DROP FUNCTION kb.admit_new_run(text, smallint, integer, boolean);
DROP FUNCTION kb.fold_queue_shard(text, smallint);
