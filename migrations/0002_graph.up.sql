-- The knowledge graph: typed objects with free-form properties, and typed directed edges.
-- SpecTasks, Sessions and TaskGraphs of the dispatcher live here too (DESIGN §9).

CREATE TABLE kb.graph_objects (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  text NOT NULL CHECK (project_id <> ''),
    type        text NOT NULL CHECK (type <> ''),
    key         text CHECK (key <> ''),
    properties  jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(properties) = 'object'),
    -- Denormalised from properties so it can be indexed and updated conditionally
    -- (UPDATE ... WHERE status = 'pending'); generated, so it can never drift from them.
    status      text GENERATED ALWAYS AS (properties ->> 'status') STORED,
    version     integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    -- Full-text document: names and titles weigh most, then summaries, then bodies.
    -- 'simple' keeps words as written: graph content is in any language.
    search      tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('simple'::regconfig, coalesce(properties ->> 'title', '')), 'A')
        || setweight(to_tsvector('simple'::regconfig, coalesce(properties ->> 'name', '')), 'A')
        || setweight(to_tsvector('simple'::regconfig, coalesce(properties ->> 'summary', '')), 'B')
        || setweight(to_tsvector('simple'::regconfig, coalesce(properties ->> 'description', '')), 'B')
        || setweight(to_tsvector('simple'::regconfig, coalesce(properties ->> 'content', '')), 'C')
    ) STORED,
    -- Short text for trigram similarity (typo-tolerant matching in search_hybrid). Bodies are
    -- left out: a short query against a long body gives meaningless similarity scores.
    search_text text GENERATED ALWAYS AS (
        coalesce(properties ->> 'title', '') || ' '
        || coalesce(properties ->> 'name', '') || ' '
        || coalesce(properties ->> 'description', '')
    ) STORED,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- list_entities by type (and status), keyset on (created_at, id).
CREATE INDEX graph_objects_type_status_idx
    ON kb.graph_objects (project_id, type, status);
CREATE INDEX graph_objects_type_created_idx
    ON kb.graph_objects (project_id, type, created_at, id);
-- Objects addressed by a natural key (SpecTask keys inside a DAG, ...).
CREATE UNIQUE INDEX graph_objects_key_uidx
    ON kb.graph_objects (project_id, type, key) WHERE key IS NOT NULL;
-- Property filters of list_entities (properties @> '{...}').
CREATE INDEX graph_objects_properties_idx
    ON kb.graph_objects USING gin (properties jsonb_path_ops);
CREATE INDEX graph_objects_search_idx
    ON kb.graph_objects USING gin (search);
CREATE INDEX graph_objects_search_trgm_idx
    ON kb.graph_objects USING gin (search_text gin_trgm_ops);
-- The dispatcher's candidate scan: pending SpecTasks only, a small index.
CREATE INDEX graph_objects_pending_spectasks_idx
    ON kb.graph_objects (project_id, created_at, id)
    WHERE type = 'SpecTask' AND status = 'pending';

CREATE TABLE kb.graph_relationships (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  text NOT NULL CHECK (project_id <> ''),
    type        text NOT NULL CHECK (type <> ''),
    src_id      uuid NOT NULL REFERENCES kb.graph_objects (id) ON DELETE CASCADE,
    dst_id      uuid NOT NULL REFERENCES kb.graph_objects (id) ON DELETE CASCADE,
    properties  jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(properties) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One edge of a type between two objects; also the outgoing-edges index (get_related,
-- graph_traverse, "blockers of"). ON CONFLICT DO NOTHING makes create_relationship idempotent.
CREATE UNIQUE INDEX graph_relationships_src_uidx
    ON kb.graph_relationships (project_id, src_id, type, dst_id);
-- Incoming edges ("is every blocker of this task completed?").
CREATE INDEX graph_relationships_dst_idx
    ON kb.graph_relationships (project_id, dst_id, type);
