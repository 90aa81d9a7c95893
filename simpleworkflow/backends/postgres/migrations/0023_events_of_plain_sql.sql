-- simpleworkflow 0023: every change of a run's status leaves its event in the audit
-- trail, whoever made it. The library's statements write their own events, richer than
-- a trigger could (the error, the retry's time, the wait), and add one to
-- logged_changes in the same update to say so; a status changed by a statement that
-- leaves logged_changes as it was (plain SQL from another runtime, an operator's psql)
-- gets its event from the trigger below. The check is the trigger's WHEN clause, two
-- comparisons of the row's old and new values: the library's statements call no
-- function for it. A constant default rewrites nothing (Postgres 11+).
alter table {schema}workflow_run add column logged_changes integer not null default 0;

create function {schema}workflow_run_log_change() returns trigger
language plpgsql as $$
begin
    insert into {schema_name}.workflow_event (workflow_id, event_type, data)
    values (
        new.id,
        case when new.status <> 'pending' then new.status
             when old.status <> 'leased' then 'retried_by_operator'
             when new.attempt > old.attempt then 'retried'
             else 'released' end,
        jsonb_strip_nulls(jsonb_build_object(
            'source', 'sql',
            'from', old.status,
            'worker_id', coalesce(new.leased_by, old.leased_by),
            'attempt', case when new.status in ('leased', 'succeeded') then new.attempt + 1
                            when new.status = 'failed' or new.attempt > old.attempt
                            then new.attempt end,
            'lease_until', case when new.status = 'leased' then new.lease_until end,
            'retry_at', case when new.status = 'pending' and old.status = 'leased'
                                  and new.attempt > old.attempt then new.run_at end,
            'error', case when new.status in ('failed', 'pending')
                               and new.last_error is distinct from old.last_error
                          then jsonb_build_object('message', new.last_error) end)));
    return null;
end
$$;

create trigger workflow_run_log_change
    after update of status on {schema}workflow_run
    for each row
    when (new.status is distinct from old.status and new.logged_changes = old.logged_changes)
    execute function {schema}workflow_run_log_change();
