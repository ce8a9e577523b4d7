-- session_sql schema version 2 for postgresql.
-- Generated from session_sql/store/schema.py (render_ddl); do not edit by hand.

CREATE SCHEMA IF NOT EXISTS session_sql;

CREATE TABLE session_sql.session_sql_meta (
	key TEXT NOT NULL,
	value TEXT NOT NULL,
	CONSTRAINT pk_session_sql_meta PRIMARY KEY (key)
);

CREATE TABLE session_sql.sessions (
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
	CONSTRAINT pk_sessions PRIMARY KEY (id)
);

CREATE INDEX ix_sessions_parent_session ON session_sql.sessions (parent_session);

CREATE INDEX ix_sessions_updated_at_id ON session_sql.sessions (updated_at, id);

CREATE TABLE session_sql.events (
	session_id TEXT NOT NULL,
	seq BIGINT NOT NULL,
	type TEXT NOT NULL,
	time BIGINT NOT NULL,
	data JSONB NOT NULL,
	source_event_seqs TEXT,
	surface_op TEXT,
	ignorable BOOLEAN,
	CONSTRAINT pk_events PRIMARY KEY (session_id, seq),
	CONSTRAINT fk_events_session_id_sessions FOREIGN KEY(session_id) REFERENCES session_sql.sessions (id) ON DELETE CASCADE
);

CREATE INDEX ix_events_type ON session_sql.events (type);

CREATE TABLE session_sql.surface (
	session_id TEXT NOT NULL,
	pos BIGINT NOT NULL,
	event_seq BIGINT NOT NULL,
	CONSTRAINT pk_surface PRIMARY KEY (session_id, pos),
	CONSTRAINT uq_surface_session_id_event_seq UNIQUE (session_id, event_seq),
	CONSTRAINT fk_surface_session_id_sessions FOREIGN KEY(session_id) REFERENCES session_sql.sessions (id) ON DELETE CASCADE,
	CONSTRAINT fk_surface_session_id_event_seq_events FOREIGN KEY(session_id, event_seq) REFERENCES session_sql.events (session_id, seq) ON DELETE CASCADE
);

CREATE VIEW session_sql.surface_messages AS SELECT session_sql.surface.session_id, session_sql.surface.pos, session_sql.events.seq, session_sql.events.type, session_sql.events.time, session_sql.events.data
FROM session_sql.surface JOIN session_sql.events ON session_sql.surface.session_id = session_sql.events.session_id AND session_sql.surface.event_seq = session_sql.events.seq;

INSERT INTO session_sql.session_sql_meta (key, value) VALUES ('schema_version', '2'), ('application', 'session_sql');
