-- simpleworkflow 0018: every change of a run's status leaves its event, whoever made it,
-- as Postgres's 0023 (see there): the library's statements write their own events and
-- add one to logged_changes; a status changed by a statement that leaves it as it was
-- (plain SQL from another runtime) gets its event from this trigger.
alter table workflow_run add column logged_changes integer not null default 0;

create trigger workflow_run_log_change
after update of status on workflow_run
when new.status is not old.status and new.logged_changes = old.logged_changes
begin
    insert into workflow_event (workflow_id, event_type, data)
    values (
        new.id,
        case when new.status <> 'pending' then new.status
             when old.status <> 'leased' then 'retried_by_operator'
             when new.attempt > old.attempt then 'retried'
             else 'released' end,
        -- a patch onto {} drops the members that are null
        json_patch('{}', json_object(
            'source', 'sql',
            'from', old.status,
            'worker_id', coalesce(new.leased_by, old.leased_by),
            'attempt', case when new.status in ('leased', 'succeeded') then new.attempt + 1
                            when new.status = 'failed' or new.attempt > old.attempt
                            then new.attempt end,
            'lease_until', case when new.status = 'leased' and new.lease_until is not null
                                then replace(new.lease_until, ' ', 'T') || '+00:00' end,
            'retry_at', case when new.status = 'pending' and old.status = 'leased'
                                  and new.attempt > old.attempt
                             then replace(new.run_at, ' ', 'T') || '+00:00' end,
            'error', json(case when new.status in ('failed', 'pending')
                                    and new.last_error is not old.last_error
                               then json_object('message', new.last_error) end))));
end;
