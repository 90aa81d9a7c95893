-- simpleworkflow 0020: what a per-key concurrency limit that does not bind costs, cut
-- (docs/performance.md#flow-control).
--
-- 1. A claim's update of its taken rows is a HOT update. The index of full counters
--    (0018) had the counts in its predicate (taken - returned_seen >= capacity), and an
--    update of a column an index reads, even only in its predicate, is never HOT: every
--    claim wrote a new primary-key entry for each counter it counted (one per key of its
--    runs). Now the predicate reads a flag, is_full, which the claim sets as the counts
--    were compared before and which changes only when a counter fills or frees. Both
--    counter tables leave half of each page free for the new versions of their rows.
alter table {schema}workflow_concurrency add column is_full boolean not null default false;
update {schema}workflow_concurrency set is_full = taken - returned_seen >= capacity;
drop index {schema}idx_workflow_concurrency_full;
alter table {schema}workflow_concurrency drop column returned_seen;
create index idx_workflow_concurrency_full
    on {schema}workflow_concurrency (workflow_name, concurrency_key)
    where is_full;
alter table {schema}workflow_concurrency set (fillfactor = 50);
alter table {schema}workflow_concurrency_returned set (fillfactor = 50);

-- 2. The library's outcome statements count the leases they end themselves, once per
--    counter per statement, instead of a trigger call (an update of two counter rows)
--    per run; they mark those runs lease_returned, which the claim clears, and the
--    trigger skips the runs so marked. Every other writer's lease ends are still
--    counted by the trigger, as before.
alter table {schema}workflow_run add column lease_returned boolean not null default false;

drop trigger workflow_run_count_leases on {schema}workflow_run;
create trigger workflow_run_count_leases
    after update of status on {schema}workflow_run
    for each row
    when (old.status = 'leased' and new.status <> 'leased' and not new.lease_returned)
    execute function {schema}workflow_run_count_leases();
