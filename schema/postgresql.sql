-- session_sql schema version 4 for postgresql.
-- Generated from session_sql/store/schema.py (render_ddl); do not edit by hand.

CREATE SCHEMA IF NOT EXISTS session_sql;

CREATE TABLE session_sql.session_sql_meta (
	key TEXT NOT NULL,
	value TEXT NOT NULL,
	CONSTRAINT pk_session_sql_meta PRIMARY KEY (key)
);

CREATE TABLE session_sql.sessions (
	tenant TEXT DEFAULT '' NOT NULL,
	id TEXT NOT NULL,
	format_version INTEGER NOT NULL,
	created_at BIGINT NOT NULL,
	parent_session TEXT,
	inherited_event_count BIGINT NOT NULL,
	header JSON NOT NULL,
	head_seq BIGINT NOT NULL,
	surface_next_pos BIGINT NOT NULL,
	replace_generation BIGINT NOT NULL,
	surface_digest BIGINT DEFAULT '0' NOT NULL,
	updated_at BIGINT NOT NULL,
	incarnation TEXT NOT NULL,
	user_id TEXT,
	title TEXT,
	labels JSONB DEFAULT '{}' NOT NULL,
	CONSTRAINT pk_sessions PRIMARY KEY (tenant, id)
);

CREATE INDEX ix_sessions_labels ON session_sql.sessions USING gin (labels jsonb_path_ops);

CREATE INDEX ix_sessions_tenant_created_at_id ON session_sql.sessions (tenant, created_at, id);

CREATE INDEX ix_sessions_tenant_parent_session ON session_sql.sessions (tenant, parent_session);

CREATE INDEX ix_sessions_tenant_updated_at_id ON session_sql.sessions (tenant, updated_at, id);

CREATE INDEX ix_sessions_tenant_user_id_updated_at_id ON session_sql.sessions (tenant, user_id, updated_at, id);

CREATE TABLE session_sql.events (
	tenant TEXT DEFAULT '' NOT NULL,
	session_id TEXT NOT NULL,
	seq BIGINT NOT NULL,
	type TEXT NOT NULL,
	time BIGINT NOT NULL,
	data JSONB NOT NULL,
	source_event_seqs TEXT,
	surface_op TEXT,
	ignorable BOOLEAN,
	call_id TEXT GENERATED ALWAYS AS (CASE WHEN (type = 'tool/call') THEN CAST(data ->> 'callId' AS VARCHAR) WHEN (type = 'tool/result') THEN CAST(data #>> '{message, source, callId}' AS VARCHAR) END) STORED,
	CONSTRAINT pk_events PRIMARY KEY (tenant, session_id, seq),
	CONSTRAINT fk_events_tenant_session_id_sessions FOREIGN KEY(tenant, session_id) REFERENCES session_sql.sessions (tenant, id) ON DELETE CASCADE
);

CREATE INDEX ix_events_tenant_session_id_call_id_type ON session_sql.events (tenant, session_id, call_id, type) WHERE call_id IS NOT NULL;

CREATE INDEX ix_events_type_tenant_session_id_seq ON session_sql.events (type, tenant, session_id, seq);

CREATE TABLE session_sql.surface (
	tenant TEXT DEFAULT '' NOT NULL,
	session_id TEXT NOT NULL,
	pos BIGINT NOT NULL,
	event_seq BIGINT NOT NULL,
	CONSTRAINT pk_surface PRIMARY KEY (tenant, session_id, pos),
	CONSTRAINT uq_surface_tenant_session_id_event_seq UNIQUE (tenant, session_id, event_seq),
	CONSTRAINT fk_surface_tenant_session_id_sessions FOREIGN KEY(tenant, session_id) REFERENCES session_sql.sessions (tenant, id) ON DELETE CASCADE,
	CONSTRAINT fk_surface_tenant_session_id_event_seq_events FOREIGN KEY(tenant, session_id, event_seq) REFERENCES session_sql.events (tenant, session_id, seq) ON DELETE CASCADE
);

CREATE VIEW session_sql.surface_messages AS SELECT session_sql.surface.tenant, session_sql.surface.session_id, session_sql.surface.pos, session_sql.events.seq, session_sql.events.type, session_sql.events.time, session_sql.events.data
FROM session_sql.surface JOIN session_sql.events ON session_sql.surface.tenant = session_sql.events.tenant AND session_sql.surface.session_id = session_sql.events.session_id AND session_sql.surface.event_seq = session_sql.events.seq;

CREATE VIEW session_sql.tool_calls AS
SELECT c.tenant AS tenant,
       c.session_id AS session_id,
       c.seq AS call_seq,
       c.call_id AS call_id,
       c.data ->> 'name' AS tool,
       c.data ->> 'arguments' AS arguments,
       CAST(c.data ->> 'turn' AS BIGINT) AS turn,
       c.time AS call_time,
       r.seq AS result_seq,
       COALESCE(r.data -> 'message' -> 'content' -> 0 -> 'isError' = 'true', FALSE) AS is_error,
       r.time - c.time AS latency_ms,
       c.seq < s.inherited_event_count AS inherited
FROM session_sql.events AS c
JOIN session_sql.sessions AS s ON s.tenant = c.tenant AND s.id = c.session_id
LEFT JOIN session_sql.events AS r
  ON r.tenant = c.tenant AND r.session_id = c.session_id AND r.call_id = c.call_id
 AND r.type = 'tool/result' AND r.surface_op = '"append"'
WHERE c.type = 'tool/call';

CREATE VIEW session_sql.turns AS
SELECT t.tenant AS tenant,
       t.session_id AS session_id,
       CAST(t.data ->> 'turn' AS BIGINT) AS turn,
       t.seq AS start_seq,
       CASE WHEN t.ended THEN t.next_seq END AS end_seq,
       t.time AS start_time,
       CASE WHEN t.ended THEN t.next_time END AS end_time,
       CASE WHEN t.ended THEN t.next_time - t.time END AS duration_ms,
       CASE WHEN t.ended THEN t.next_data -> 'reason' ->> 'kind' END AS reason,
       (SELECT COUNT(m.seq) FROM session_sql.events AS m WHERE m.type = 'user/message' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(t.next_seq, s.head_seq + 1)) AS user_messages,
       (SELECT COUNT(m.seq) FROM session_sql.events AS m WHERE m.type = 'assistant/message' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(t.next_seq, s.head_seq + 1)) AS assistant_messages,
       (SELECT COUNT(m.seq) FROM session_sql.events AS m WHERE m.type = 'tool/call' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(t.next_seq, s.head_seq + 1)) AS tool_calls,
       (SELECT COUNT(m.seq) FROM session_sql.events AS m WHERE m.type = 'tool/result' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(t.next_seq, s.head_seq + 1)) AS tool_results,
       t.seq < s.inherited_event_count AS inherited
FROM (SELECT b.tenant AS tenant, b.session_id AS session_id, b.seq AS seq, b.type AS type,
             b.time AS time, b.data AS data,
             LEAD(b.seq) OVER w AS next_seq,
             LEAD(b.time) OVER w AS next_time,
             LEAD(b.data) OVER w AS next_data,
             COALESCE(LEAD(b.type) OVER w = 'turn/end'
                      AND LEAD(b.data ->> 'turn') OVER w = (b.data ->> 'turn'), FALSE) AS ended
      FROM session_sql.events AS b
      WHERE b.type IN ('turn/start', 'turn/end')
      WINDOW w AS (PARTITION BY b.tenant, b.session_id ORDER BY b.seq)) AS t
JOIN session_sql.sessions AS s ON s.tenant = t.tenant AND s.id = t.session_id
WHERE t.type = 'turn/start';

CREATE VIEW session_sql.replacements AS
SELECT r.tenant AS tenant,
       r.session_id AS session_id,
       r.seq AS seq,
       r.type AS type,
       CASE WHEN r.type = 'surface/removed' THEN 'remove' ELSE 'replace' END AS op,
       r.data ->> 'reason' AS reason,
       r.time AS time,
       (SELECT COUNT(src.value) FROM jsonb_array_elements_text(CAST(r.source_event_seqs AS JSONB)) AS src(value)) AS source_events,
       (SELECT COUNT(x.seq) FROM jsonb_array_elements_text(CAST(r.source_event_seqs AS JSONB)) AS src(value) JOIN session_sql.events AS x ON x.tenant = r.tenant AND x.session_id = r.session_id AND x.seq = CAST(src.value AS BIGINT) AND x.type IN ('user/message', 'assistant/message', 'tool/result')) AS shadowed_events,
       (SELECT COALESCE(SUM(length(CAST(x.data AS TEXT))), 0) FROM jsonb_array_elements_text(CAST(r.source_event_seqs AS JSONB)) AS src(value) JOIN session_sql.events AS x ON x.tenant = r.tenant AND x.session_id = r.session_id AND x.seq = CAST(src.value AS BIGINT) AND x.type IN ('user/message', 'assistant/message', 'tool/result')) AS bytes_before,
       CASE WHEN r.type = 'surface/removed' THEN 0
            ELSE length(CAST(r.data AS TEXT)) END AS bytes_after,
       r.seq < s.inherited_event_count AS inherited
FROM session_sql.events AS r
JOIN session_sql.sessions AS s ON s.tenant = r.tenant AND s.id = r.session_id
WHERE r.surface_op IS NOT NULL AND r.surface_op <> '"append"';

CREATE VIEW session_sql.source_event_seqs AS
SELECT e.tenant AS tenant,
       e.session_id AS session_id,
       e.seq AS seq,
       e.type AS type,
       src.n - 1 AS ordinal,
       CAST(src.value AS BIGINT) AS source_seq
FROM session_sql.events AS e
JOIN session_sql.sessions AS s ON s.tenant = e.tenant AND s.id = e.session_id
JOIN LATERAL jsonb_array_elements_text(CAST(e.source_event_seqs AS JSONB)) WITH ORDINALITY AS src(value, n) ON TRUE
WHERE e.source_event_seqs IS NOT NULL;

ALTER TABLE session_sql.sessions ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON session_sql.sessions USING (tenant = current_setting('session_sql.tenant', true) AND (tenant <> '' OR current_setting('session_sql.default_tenant', true) = 'on')) WITH CHECK (tenant = current_setting('session_sql.tenant', true) AND (tenant <> '' OR current_setting('session_sql.default_tenant', true) = 'on'));

ALTER TABLE session_sql.events ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON session_sql.events USING (tenant = current_setting('session_sql.tenant', true) AND (tenant <> '' OR current_setting('session_sql.default_tenant', true) = 'on')) WITH CHECK (tenant = current_setting('session_sql.tenant', true) AND (tenant <> '' OR current_setting('session_sql.default_tenant', true) = 'on'));

ALTER TABLE session_sql.surface ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON session_sql.surface USING (tenant = current_setting('session_sql.tenant', true) AND (tenant <> '' OR current_setting('session_sql.default_tenant', true) = 'on')) WITH CHECK (tenant = current_setting('session_sql.tenant', true) AND (tenant <> '' OR current_setting('session_sql.default_tenant', true) = 'on'));

ALTER VIEW session_sql.surface_messages SET (security_invoker = true);

INSERT INTO session_sql.session_sql_meta (key, value) VALUES ('schema_version', '4'), ('application', 'session_sql');
