-- simpleworkflow 0015: worker presence, as Postgres's 0019: one row per worker process,
-- upserted once per heartbeat interval, live until seen_until; a graceful stop sets
-- stopped_at. Rows gone for a day are deleted by the retention sweep.
create table workflow_worker (
    worker_id     text primary key,
    host          text not null,
    pid           integer not null,
    runtime       text not null default 'python',
    type_prefixes text not null default '[]',
    concurrency   integer,
    version       text,
    started_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    last_seen_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    seen_until    text not null,
    stopped_at    text
);
create index idx_workflow_worker_seen_until on workflow_worker (seen_until);
