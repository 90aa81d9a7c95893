-- simpleworkflow 0013: debounce (docs/flow-control.md). A debounced start names a key;
-- while a run of its type with that key is pending and no worker has claimed it, later
-- starts with the key update that run in place (payload, options, due time) instead of
-- inserting another. The unique index is what makes that one row per key under any
-- number of concurrent callers: `insert ... on conflict (type, debounce_key) where ...
-- do update` names it.
alter table {schema}workflow_run add column debounce_key text;

create unique index idx_workflow_run_debounce
    on {schema}workflow_run (type, debounce_key)
    where status = 'pending' and deleted_at is null and debounce_key is not null;

-- A run leaves its debounce when it stops being pending (a worker claims it, or it is
-- cancelled): the next start with its key makes a fresh run, and a run given back to the
-- queue later (a retry, a sleep, a release) never takes another call's payload. In the
-- row itself, so that workers in any language that claim with their own SQL do it too;
-- only rows that carry a key call the function.
create function {schema}workflow_run_debounce_closed() returns trigger
language plpgsql as $$
begin
    new.debounce_key := null;
    return new;
end
$$;

create trigger workflow_run_debounce_closed
    before update on {schema}workflow_run
    for each row
    when (old.debounce_key is not null and new.status <> 'pending')
    execute function {schema}workflow_run_debounce_closed();
