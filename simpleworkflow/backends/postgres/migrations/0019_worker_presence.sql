-- simpleworkflow 0019: worker presence. Workers were seen only through the leases they
-- hold, so an idle one was invisible. Each worker process now keeps one row here, upserted
-- once per heartbeat interval (docs/workers.md#presence): who and where it is, what it
-- claims, and until when it counts as live (seen_until, a lease's length past its last
-- write). A graceful stop sets stopped_at and seen_until to that moment; a worker that
-- died simply stops writing. Rows gone for a day are deleted by the retention sweep, and
-- by a purge of that age.
create table {schema}workflow_worker (
    worker_id     text primary key,
    host          text not null,
    pid           integer not null,
    runtime       text not null default 'python',
    type_prefixes jsonb not null default '[]',
    concurrency   integer,
    version       text,
    started_at    timestamptz not null default now(),
    last_seen_at  timestamptz not null default now(),
    seen_until    timestamptz not null,
    stopped_at    timestamptz
);
create index idx_workflow_worker_seen_until on {schema}workflow_worker (seen_until);
