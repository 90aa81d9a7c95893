-- simpleworkflow 0007: topics, as Postgres's 0010. A subscription has a workflow type run
-- once for every event published on a topic its pattern matches; the pattern's match rule
-- is computed by the table itself, so that every publisher matches alike.
create table workflow_subscription (
    pattern       text not null,
    workflow_type text not null,
    priority      integer not null default 100,
    max_attempts  integer check (max_attempts >= 1),
    created_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
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
