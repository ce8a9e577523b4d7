-- session_sql schema version 4 for sqlite.
-- Generated from session_sql/store/schema.py (render_ddl); do not edit by hand.

CREATE TABLE session_sql_meta (
	"key" TEXT NOT NULL,
	value TEXT NOT NULL,
	CONSTRAINT pk_session_sql_meta PRIMARY KEY ("key")
);

CREATE TABLE sessions (
	tenant TEXT DEFAULT '' NOT NULL,
	id TEXT NOT NULL,
	format_version INTEGER NOT NULL,
	created_at BIGINT NOT NULL,
	parent_session TEXT,
	inherited_event_count BIGINT NOT NULL,
	header TEXT NOT NULL,
	head_seq BIGINT NOT NULL,
	surface_next_pos BIGINT NOT NULL,
	replace_generation BIGINT NOT NULL,
	surface_digest BIGINT DEFAULT '0' NOT NULL,
	updated_at BIGINT NOT NULL,
	incarnation TEXT NOT NULL,
	user_id TEXT,
	title TEXT,
	labels TEXT DEFAULT '{}' NOT NULL,
	CONSTRAINT pk_sessions PRIMARY KEY (tenant, id)
);

CREATE INDEX ix_sessions_tenant_created_at_id ON sessions (tenant, created_at, id);

CREATE INDEX ix_sessions_tenant_parent_session ON sessions (tenant, parent_session);

CREATE INDEX ix_sessions_tenant_updated_at_id ON sessions (tenant, updated_at, id);

CREATE INDEX ix_sessions_tenant_user_id_updated_at_id ON sessions (tenant, user_id, updated_at, id);

CREATE TABLE events (
	tenant TEXT DEFAULT '' NOT NULL,
	session_id TEXT NOT NULL,
	seq BIGINT NOT NULL,
	type TEXT NOT NULL,
	time BIGINT NOT NULL,
	data TEXT NOT NULL,
	source_event_seqs TEXT,
	surface_op TEXT,
	ignorable BOOLEAN,
	call_id TEXT GENERATED ALWAYS AS (CASE WHEN (type = 'tool/call') THEN CAST(JSON_EXTRACT(data, '$."callId"') AS VARCHAR) WHEN (type = 'tool/result') THEN CAST(JSON_EXTRACT(data, '$."message"."source"."callId"') AS VARCHAR) END) STORED,
	CONSTRAINT pk_events PRIMARY KEY (tenant, session_id, seq),
	CONSTRAINT fk_events_tenant_session_id_sessions FOREIGN KEY(tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);

CREATE INDEX ix_events_tenant_session_id_call_id_type ON events (tenant, session_id, call_id, type) WHERE call_id IS NOT NULL;

CREATE INDEX ix_events_type_tenant_session_id_seq ON events (type, tenant, session_id, seq);

CREATE TABLE surface (
	tenant TEXT DEFAULT '' NOT NULL,
	session_id TEXT NOT NULL,
	pos BIGINT NOT NULL,
	event_seq BIGINT NOT NULL,
	CONSTRAINT pk_surface PRIMARY KEY (tenant, session_id, pos),
	CONSTRAINT uq_surface_tenant_session_id_event_seq UNIQUE (tenant, session_id, event_seq),
	CONSTRAINT fk_surface_tenant_session_id_sessions FOREIGN KEY(tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE,
	CONSTRAINT fk_surface_tenant_session_id_event_seq_events FOREIGN KEY(tenant, session_id, event_seq) REFERENCES events (tenant, session_id, seq) ON DELETE CASCADE
);

CREATE VIEW surface_messages AS SELECT surface.tenant, surface.session_id, surface.pos, events.seq, events.type, events.time, events.data
FROM surface JOIN events ON surface.tenant = events.tenant AND surface.session_id = events.session_id AND surface.event_seq = events.seq;

CREATE VIEW tool_calls AS
SELECT c.tenant AS tenant,
       c.session_id AS session_id,
       c.seq AS call_seq,
       c.call_id AS call_id,
       c.data ->> 'name' AS tool,
       c.data ->> 'arguments' AS arguments,
       CAST(c.data ->> 'turn' AS BIGINT) AS turn,
       c.time AS call_time,
       r.seq AS result_seq,
       COALESCE(r.data -> 'message' -> 'content' -> 0 ->> 'isError' = 1, FALSE) AS is_error,
       r.time - c.time AS latency_ms,
       c.seq < s.inherited_event_count AS inherited
FROM events AS c
JOIN sessions AS s ON s.tenant = c.tenant AND s.id = c.session_id
LEFT JOIN events AS r
  ON r.tenant = c.tenant AND r.session_id = c.session_id AND r.call_id = c.call_id
 AND r.type = 'tool/result' AND r.surface_op = '"append"'
WHERE c.type = 'tool/call';

CREATE VIEW turns AS
SELECT t.tenant AS tenant,
       t.session_id AS session_id,
       CAST(t.data ->> 'turn' AS BIGINT) AS turn,
       t.seq AS start_seq,
       e.seq AS end_seq,
       t.time AS start_time,
       e.time AS end_time,
       e.time - t.time AS duration_ms,
       e.data -> 'reason' ->> 'kind' AS reason,
       (SELECT COUNT(m.seq) FROM events AS m WHERE m.type = 'user/message' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(ne.seq, ns.seq, s.head_seq + 1)) AS user_messages,
       (SELECT COUNT(m.seq) FROM events AS m WHERE m.type = 'assistant/message' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(ne.seq, ns.seq, s.head_seq + 1)) AS assistant_messages,
       (SELECT COUNT(m.seq) FROM events AS m WHERE m.type = 'tool/call' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(ne.seq, ns.seq, s.head_seq + 1)) AS tool_calls,
       (SELECT COUNT(m.seq) FROM events AS m WHERE m.type = 'tool/result' AND m.tenant = t.tenant AND m.session_id = t.session_id AND m.seq > t.seq AND m.seq < COALESCE(ne.seq, ns.seq, s.head_seq + 1)) AS tool_results,
       t.seq < s.inherited_event_count AS inherited
FROM events AS t
JOIN sessions AS s ON s.tenant = t.tenant AND s.id = t.session_id
LEFT JOIN events AS ns
  ON ns.type = 'turn/start' AND ns.tenant = t.tenant AND ns.session_id = t.session_id
 AND ns.seq = (SELECT MIN(x.seq) FROM events AS x WHERE x.type = 'turn/start' AND x.tenant = t.tenant AND x.session_id = t.session_id AND x.seq > t.seq)
LEFT JOIN events AS ne
  ON ne.type = 'turn/end' AND ne.tenant = t.tenant AND ne.session_id = t.session_id
 AND ne.seq = (SELECT MIN(x.seq) FROM events AS x WHERE x.type = 'turn/end' AND x.tenant = t.tenant AND x.session_id = t.session_id AND x.seq > t.seq)
 AND ne.seq < COALESCE(ns.seq, s.head_seq + 1)
LEFT JOIN events AS e
  ON e.tenant = ne.tenant AND e.session_id = ne.session_id AND e.seq = ne.seq
 AND (e.data ->> 'turn') = (t.data ->> 'turn')
WHERE t.type = 'turn/start';

CREATE VIEW replacements AS
SELECT r.tenant AS tenant,
       r.session_id AS session_id,
       r.seq AS seq,
       r.type AS type,
       CASE WHEN r.type = 'surface/removed' THEN 'remove' ELSE 'replace' END AS op,
       r.data ->> 'reason' AS reason,
       r.time AS time,
       (SELECT COUNT(src.value) FROM json_each(r.source_event_seqs) AS src) AS source_events,
       (SELECT COUNT(x.seq) FROM json_each(r.source_event_seqs) AS src JOIN events AS x ON x.tenant = r.tenant AND x.session_id = r.session_id AND x.seq = CAST(src.value AS BIGINT) AND x.type IN ('user/message', 'assistant/message', 'tool/result')) AS shadowed_events,
       (SELECT COALESCE(SUM(length(CAST(x.data AS TEXT))), 0) FROM json_each(r.source_event_seqs) AS src JOIN events AS x ON x.tenant = r.tenant AND x.session_id = r.session_id AND x.seq = CAST(src.value AS BIGINT) AND x.type IN ('user/message', 'assistant/message', 'tool/result')) AS bytes_before,
       CASE WHEN r.type = 'surface/removed' THEN 0
            ELSE length(CAST(r.data AS TEXT)) END AS bytes_after,
       r.seq < s.inherited_event_count AS inherited
FROM events AS r
JOIN sessions AS s ON s.tenant = r.tenant AND s.id = r.session_id
WHERE r.surface_op IS NOT NULL AND r.surface_op <> '"append"';

CREATE VIEW source_event_seqs AS
SELECT e.tenant AS tenant,
       e.session_id AS session_id,
       e.seq AS seq,
       e.type AS type,
       CAST(src.key AS BIGINT) AS ordinal,
       CAST(src.value AS BIGINT) AS source_seq
FROM events AS e
JOIN sessions AS s ON s.tenant = e.tenant AND s.id = e.session_id
JOIN json_each(e.source_event_seqs) AS src ON TRUE
WHERE e.source_event_seqs IS NOT NULL;

INSERT INTO session_sql_meta ("key", value) VALUES ('schema_version', '4'), ('application', 'session_sql');
