"""A run's path through the executor: `loop` (AgentLoop, step after step), `step`
(StepRunner: one model call and its tools), `run_position` (where an execution begins),
`continuation` and `resume` (picking a conversation up; ResumeRun), `recovery` (rebuilding it
after a crash), `soft_stop`, `structured_output`, `streaming`. Domain: may use the executor's
values, model, tools, approvals, coordination and store packages; never a servicer.
"""
