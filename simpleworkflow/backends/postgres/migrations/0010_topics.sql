-- simpleworkflow 0010: topics. A subscription has a workflow type run once for every event
-- published on a topic its pattern matches (see docs/topics.md); publishing is an insert
-- of runs that plain SQL can do too. The pattern's match rule is kept beside it, computed
-- by the table itself, so that every publisher (the clients, a producer in any language)
-- matches alike and a subscription inserted by hand needs nothing more than its pattern.
create table {schema}workflow_subscription (
    pattern       text not null,
    workflow_type text not null,
    -- the start options of the runs it starts
    priority      integer not null default 100,
    max_attempts  integer
                  constraint workflow_subscription_max_attempts_check check (max_attempts >= 1),
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now(),
    -- the pattern as a LIKE pattern: '*' and '#' become '%', '_' is escaped
    topic_like    text not null generated always as (
                      replace(replace(replace(pattern, '_', '\_'), '*', '%'), '#', '%')) stored,
    -- the number of segments a matching topic has; null after a last '#' (one or more)
    segments      integer generated always as (
                      case when substr(pattern, length(pattern)) = '#' then null
                           else length(pattern) - length(replace(pattern, '.', '')) + 1
                      end) stored,
    primary key (pattern, workflow_type)
);
