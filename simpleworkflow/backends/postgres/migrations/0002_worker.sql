-- simpleworkflow 0002: fencing tokens, lease expiry, and wake-ups for workers.

-- A new token at every claim: a worker's writes for a run count only while the run
-- still carries the token it was given, so a worker that lost its lease cannot
-- overwrite the outcome of the worker that took the run over.
alter table {schema}workflow_run add column lease_token uuid;

-- Expired leases are found without reading pending or finished runs.
create index idx_workflow_run_lease_expiry
    on {schema}workflow_run (lease_until)
    where status = 'leased';

-- Wake-ups for idle workers, for rows written by any client in any language:
-- channel 'simpleworkflow', payload 'wake <schema> <type> <due, epoch seconds>' or
-- 'cancel <schema> <run id>'.
create function {schema}workflow_run_notify_insert() returns trigger
language plpgsql as $$
begin
    perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || t.type)
    from (select distinct type from inserted_runs where status = 'pending') as t;
    return null;
end
$$;

create trigger workflow_run_notify_insert
    after insert on {schema}workflow_run
    referencing new table as inserted_runs
    for each statement execute function {schema}workflow_run_notify_insert();

create function {schema}workflow_run_notify_update() returns trigger
language plpgsql as $$
begin
    if new.status = 'cancelled' then
        perform pg_notify('simpleworkflow', 'cancel ' || tg_table_schema || ' ' || new.id);
    else
        perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || new.type
                                            || ' ' || extract(epoch from new.run_at));
    end if;
    return null;
end
$$;

-- Only transitions a worker must hear about call the function: a run becoming pending
-- (or due earlier), and a leased run being cancelled.
create trigger workflow_run_notify_update
    after update on {schema}workflow_run
    for each row
    when ((new.status = 'pending' and (old.status <> 'pending' or new.run_at < old.run_at))
          or (new.status = 'cancelled' and old.status = 'leased'))
    execute function {schema}workflow_run_notify_update();
