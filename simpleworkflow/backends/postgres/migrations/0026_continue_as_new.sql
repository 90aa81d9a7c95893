-- simpleworkflow 0026: continue-as-new (ctx.continue_as_new). A run that continues ends
-- succeeded and names the run that carries on in continued_as; that run names it back in
-- continued_from. Both are null on every other run, and neither is indexed or a foreign
-- key: a link is followed by primary key, so a run that never continues pays nothing at
-- its insert, and retention may delete one run of a chain before the next.
alter table {schema}workflow_run add column continued_as uuid;
alter table {schema}workflow_run add column continued_from uuid;
