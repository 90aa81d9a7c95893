-- simpleworkflow 0006: wake-ups for runs due now carry no due time.
--
-- A worker compared the due time in a wake-up (database clock) with its own clock, so a
-- database clock ahead of the worker's by d held every new run back by d. A run due now
-- is now sent as 'wake <schema> <type>', which a worker claims at once; only runs due
-- later carry their due time, for the worker to set a timer.
create or replace function {schema}workflow_run_notify_insert() returns trigger
language plpgsql as $$
begin
    insert into {schema_name}.workflow_event (workflow_id, event_type, data)
    select id, 'created', jsonb_build_object('type', type, 'priority', priority, 'run_at', run_at)
    from inserted_runs
    order by created_at, id;
    -- one wake-up per type, saying when its earliest new run is due if that is later
    perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || t.type
                                        || case when t.due > now()
                                                then ' ' || extract(epoch from t.due)
                                                else '' end)
    from (select type, min(run_at) as due from inserted_runs
          where status = 'pending' group by type) as t;
    return null;
end
$$;

create or replace function {schema}workflow_run_notify_update() returns trigger
language plpgsql as $$
begin
    if new.status = 'cancelled' then
        perform pg_notify('simpleworkflow', 'cancel ' || tg_table_schema || ' ' || new.id);
    else
        perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || new.type
                                            || case when new.run_at > now()
                                                    then ' ' || extract(epoch from new.run_at)
                                                    else '' end);
    end if;
    return null;
end
$$;
