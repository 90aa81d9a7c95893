-- simpleworkflow 0017: the dashboard's throughput chart counts the runs that finished
-- and the attempts that failed, minute by minute over the last hour. The audit table
-- holds every event of every run (heartbeats included); this partial index holds only
-- those outcomes, by time, so the chart reads an hour of them and nothing else.
create index idx_workflow_event_outcomes
    on {schema}workflow_event (created_at)
    where event_type in ('succeeded', 'failed', 'retried');
