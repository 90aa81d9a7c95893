-- simpleworkflow 0022: streams, as Postgres's 0028: one row per item of a run's named
-- stream, numbered from 0 in the order written, the last one maybe its close marker;
-- origin and origin_seq keep a step run again after a crash from inserting twice.
create table workflow_stream_item (
    run_id      text not null references workflow_run (id) on delete cascade,
    stream_key  text not null,
    position    integer not null,
    origin      text not null,
    origin_seq  integer not null,
    value       text check (value is null or json_valid(value)),
    closed      integer not null default 0,
    created_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    primary key (run_id, stream_key, position)
);
create unique index idx_workflow_stream_item_origin
    on workflow_stream_item (run_id, stream_key, origin, origin_seq);
