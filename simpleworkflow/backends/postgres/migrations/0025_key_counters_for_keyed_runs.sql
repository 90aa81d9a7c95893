-- simpleworkflow 0025: a start that names no concurrency key pays nothing for concurrency
-- keys. The statement trigger workflow_run_count_keys ran for every insert (a plpgsql
-- call and an insert with a join, about 20 µs of backend CPU a start) to create the
-- counters of limited types and keys. The counter of a type ('') exists from the moment
-- its limit is set (recount_concurrency creates it, runs or none), so only a key's counter
-- is new at an insert: the row trigger below creates it, and its WHEN clause calls it only
-- for rows with a concurrency key. Concurrent inserts of new keys take their counters in
-- row order: the library's create_runs inserts in key order, so that two batches never
-- wait on each other's new keys in a cycle.
drop trigger workflow_run_count_keys on {schema}workflow_run;
drop function {schema}workflow_run_count_keys();

create function {schema}workflow_run_count_key() returns trigger
language plpgsql as $$
begin
    with counter as (
        insert into {schema_name}.workflow_concurrency (workflow_name, concurrency_key, capacity)
        select g.workflow_name, new.concurrency_key, g.key_concurrency
        from {schema_name}.workflow_registry g
        where g.workflow_name = new.type and g.key_concurrency is not null
        on conflict do nothing
        returning workflow_name, concurrency_key
    )
    insert into {schema_name}.workflow_concurrency_returned (workflow_name, concurrency_key)
    select workflow_name, concurrency_key from counter
    on conflict do nothing;
    return null;
end
$$;

create trigger workflow_run_count_key
    after insert on {schema}workflow_run
    for each row
    when (new.concurrency_key is not null)
    execute function {schema}workflow_run_count_key();
