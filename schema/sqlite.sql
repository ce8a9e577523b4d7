-- session_sql schema version 2 for sqlite.
-- Generated from session_sql/store/schema.py (render_ddl); do not edit by hand.

CREATE TABLE session_sql_meta (
	"key" TEXT NOT NULL,
	value TEXT NOT NULL,
	CONSTRAINT pk_session_sql_meta PRIMARY KEY ("key")
);

CREATE TABLE sessions (
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
	CONSTRAINT pk_sessions PRIMARY KEY (id)
);

CREATE INDEX ix_sessions_parent_session ON sessions (parent_session);

CREATE INDEX ix_sessions_updated_at_id ON sessions (updated_at, id);

CREATE TABLE events (
	session_id TEXT NOT NULL,
	seq BIGINT NOT NULL,
	type TEXT NOT NULL,
	time BIGINT NOT NULL,
	data TEXT NOT NULL,
	source_event_seqs TEXT,
	surface_op TEXT,
	ignorable BOOLEAN,
	CONSTRAINT pk_events PRIMARY KEY (session_id, seq),
	CONSTRAINT fk_events_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE
);

CREATE INDEX ix_events_type ON events (type);

CREATE TABLE surface (
	session_id TEXT NOT NULL,
	pos BIGINT NOT NULL,
	event_seq BIGINT NOT NULL,
	CONSTRAINT pk_surface PRIMARY KEY (session_id, pos),
	CONSTRAINT uq_surface_session_id_event_seq UNIQUE (session_id, event_seq),
	CONSTRAINT fk_surface_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE,
	CONSTRAINT fk_surface_session_id_event_seq_events FOREIGN KEY(session_id, event_seq) REFERENCES events (session_id, seq) ON DELETE CASCADE
);

CREATE VIEW surface_messages AS SELECT surface.session_id, surface.pos, events.seq, events.type, events.time, events.data
FROM surface JOIN events ON surface.session_id = events.session_id AND surface.event_seq = events.seq;

INSERT INTO session_sql_meta ("key", value) VALUES ('schema_version', '2'), ('application', 'session_sql');
