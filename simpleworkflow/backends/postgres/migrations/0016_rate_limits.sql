-- simpleworkflow 0016: rate limits (docs/flow-control.md). A named limit lets at most
-- max_runs claims through per period (per concurrency key, if per_key); a type names the
-- limit it obeys in workflow_registry.rate_limit. Runs over it stay pending, due again
-- when the next window opens.
create table {schema}workflow_rate_limit (
    name        text primary key,
    max_runs    integer not null
                constraint workflow_rate_limit_max_runs_check check (max_runs >= 1),
    period      float8 not null
                constraint workflow_rate_limit_period_check check (period > 0),
    per_key     boolean not null default false,
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now()
);

alter table {schema}workflow_registry add column rate_limit text;

-- The current window of each limit (and key): when it opened (a multiple of the period
-- since the epoch), how many claims it let through, and how many the last claim got.
-- The claim updates it with on conflict do update, which locks its newest version: two
-- claims never both take the last token.
create table {schema}workflow_rate_window (
    name         text not null,
    rate_key     text not null,
    window_start timestamptz not null,
    used         integer not null default 0,
    granted      integer not null default 0,
    primary key (name, rate_key)
);
