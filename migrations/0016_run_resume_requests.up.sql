-- ResumeRun idempotency by a key (issue #17): one row per (run, request_id), naming the
-- STATUS_CHANGED(paused -> running) of that resume. A replayed request_id finds its resume
-- here by primary key, not by matching the text of an event's reason.
CREATE TABLE kb.agent_run_resume_requests (
    run_id      uuid NOT NULL REFERENCES kb.agent_runs (id) ON DELETE CASCADE,
    request_id  text NOT NULL CHECK (request_id <> ''),
    -- seq of the resume's STATUS_CHANGED: the replay streams the events from it on.
    event_seq   integer NOT NULL CHECK (event_seq >= 1),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, request_id)
);

-- Resumes recorded before this table: their reason was "resumed (request_id <id>)". Only a
-- paused -> running change is a resume (a cancel's reason is free text and could read alike).
INSERT INTO kb.agent_run_resume_requests (run_id, request_id, event_seq, created_at)
SELECT DISTINCT ON (run_id, request_id) run_id, request_id, seq, created_at
FROM (
    SELECT run_id, seq, created_at,
           substring(payload ->> 'reason' FROM '^resumed \(request_id (.+)\)$') AS request_id
    FROM kb.agent_run_events
    WHERE type = 'status_changed'
      AND payload ->> 'from_status' = 'paused'
      AND payload ->> 'to_status' = 'running'
) AS resumes
WHERE request_id IS NOT NULL
ORDER BY run_id, request_id, seq DESC;
