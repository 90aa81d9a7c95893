-- simpleworkflow 0014: as Postgres's 0017, the runs that finished and the attempts that
-- failed, by time, for the dashboard's throughput chart: a partial index of the audit
-- table that holds only those events.
create index idx_workflow_event_outcomes
    on workflow_event (created_at)
    where event_type in ('succeeded', 'failed', 'retried');
