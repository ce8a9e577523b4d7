-- session_sql schema version 3 for postgresql.
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
	CONSTRAINT pk_events PRIMARY KEY (tenant, session_id, seq),
	CONSTRAINT fk_events_tenant_session_id_sessions FOREIGN KEY(tenant, session_id) REFERENCES session_sql.sessions (tenant, id) ON DELETE CASCADE
);

CREATE INDEX ix_events_type ON session_sql.events (type);

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

ALTER TABLE session_sql.sessions ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON session_sql.sessions USING (tenant = current_setting('session_sql.tenant', true)) WITH CHECK (tenant = current_setting('session_sql.tenant', true));

ALTER TABLE session_sql.events ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON session_sql.events USING (tenant = current_setting('session_sql.tenant', true)) WITH CHECK (tenant = current_setting('session_sql.tenant', true));

ALTER TABLE session_sql.surface ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON session_sql.surface USING (tenant = current_setting('session_sql.tenant', true)) WITH CHECK (tenant = current_setting('session_sql.tenant', true));

ALTER VIEW session_sql.surface_messages SET (security_invoker = true);

INSERT INTO session_sql.session_sql_meta (key, value) VALUES ('schema_version', '3'), ('application', 'session_sql');
