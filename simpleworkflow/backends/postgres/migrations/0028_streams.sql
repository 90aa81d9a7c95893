-- simpleworkflow 0028: streams (ctx.stream_append / ctx.stream_close). One row per item
-- of a run's named stream, numbered from 0 in the order written; a stream's last row may
-- be its close marker (closed, value null). A run's streams also end with the run: a
-- reader stops once the run is terminal and no item is left. ``origin`` and ``origin_seq``
-- name the durable call (or step) that wrote an item and its place among that call's
-- items of the stream, so that a step run again after a crash inserts nothing twice. No
-- foreign key: the run's delete trigger of this migration removes the rows.
create table {schema}workflow_stream_item (
    run_id      uuid not null,
    stream_key  text not null,
    position    bigint not null,
    origin      text not null,
    origin_seq  integer not null,
    value       jsonb,
    closed      boolean not null default false,
    created_at  timestamptz not null default now(),
    primary key (run_id, stream_key, position)
);
create unique index idx_workflow_stream_item_origin
    on {schema}workflow_stream_item (run_id, stream_key, origin, origin_seq);

create function {schema}workflow_run_delete_streams() returns trigger
language plpgsql as $$
begin
    delete from {schema_name}.workflow_stream_item
    where run_id = any(array(select id from deleted_runs));
    return null;
end
$$;

create trigger workflow_run_delete_streams
    after delete on {schema}workflow_run
    referencing old table as deleted_runs
    for each statement execute function {schema}workflow_run_delete_streams();
