-- simpleworkflow 0020: continue-as-new, as Postgres's 0026: the run that carries on a run
-- that continued (continued_as) and the run it carries on (continued_from); null on every
-- other run, not indexed, no foreign key (a link is followed by primary key).
alter table workflow_run add column continued_as text;
alter table workflow_run add column continued_from text;
