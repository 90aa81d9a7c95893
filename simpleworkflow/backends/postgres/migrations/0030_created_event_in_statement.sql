-- simpleworkflow 0030: the library's starts write their own created event and wake-up.
-- create_run and create_runs insert each run's created event and send the wake-up of
-- its type in the insert statement itself, and mark their rows logged_changes = 1. The
-- insert trigger, a statement trigger over a transition table until now, becomes a row
-- trigger whose WHEN clause leaves those rows out: every other insert (plain SQL, another
-- runtime, the library's rarer inserts) gets the same event and wake-up from it as before,
-- and a start no longer pays for the trigger's call and the copy of its rows (a fifth of
-- the server's CPU per single start; docs/performance.md).
drop trigger workflow_run_notify_insert on {schema}workflow_run;

create or replace function {schema}workflow_run_notify_insert() returns trigger
language plpgsql as $$
begin
    insert into {schema_name}.workflow_event (workflow_id, event_type, data)
    values (new.id, 'created', jsonb_build_object('type', new.type, 'priority', new.priority,
                                                  'run_at', new.run_at));
    -- identical wake-ups of one transaction reach a listener once
    if new.status = 'pending' then
        perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || new.type
                                            || case when new.run_at > now()
                                                    then ' ' || extract(epoch from new.run_at)
                                                    else '' end);
    end if;
    return null;
end
$$;

create trigger workflow_run_notify_insert
    after insert on {schema}workflow_run
    for each row
    when (new.logged_changes = 0)
    execute function {schema}workflow_run_notify_insert();
