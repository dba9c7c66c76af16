DROP FUNCTION kb.admit_new_run(text, smallint, integer, boolean);
